import json
import sqlite3

import pytest

from agentgym import Episode, EpisodeFilter, StoreError, TrajectoryStore, Turn


def make_episode(i: int, *, env="Maze-v0", run="r1", status="complete", reward=None, turns=3) -> Episode:
    reward = float(i % 2) if reward is None else reward
    return Episode(
        id=f"ep{i:05d}", run_id=run, env_id=env, task_id=f"t{i % 4}", seed=i, group_id=f"g{i // 4}",
        status=status, failure="infra" if status == "error" else None, error="boom" if status == "error" else None,
        policy_version=i % 3, metadata={"source": "test", "i": i},
        turns=[Turn(index=t, observation=f"obs {t} ünïcode 🤖", action_text=f"act {t}", prompt_ids=[1, 2, t],
                    action_ids=[5, 6], action_logprobs=[-0.5, -1.25], token_versions=[0, 1],
                    reward=reward if t == turns - 1 else 0.0, terminated=t == turns - 1,
                    info={"k": t, "nested": {"a": [1, 2]}}, state_fingerprint=f"fp{t}",
                    timings={"env_s": 0.01}, loss_mask=[1, 0] if t == 0 else None, finish_reason="stop")
               for t in range(turns)],
    ).finish()


def test_round_trip_keeps_every_field(store_url):
    store = TrajectoryStore(store_url)
    episodes = [make_episode(i) for i in range(10)]
    assert store.put_many(episodes) == 10
    for ep in episodes:
        assert store.get(ep.id) == ep
    assert store.count() == 10


def test_writes_are_idempotent_by_episode_id(store_url):
    store = TrajectoryStore(store_url)
    ep = make_episode(1)
    store.put(ep)
    ep.turns = ep.turns[:1]
    ep.status = "truncated"
    store.put(ep)
    assert store.count() == 1 and store.get(ep.id).num_turns == 1 and store.get(ep.id).status == "truncated"


def test_queries_by_run_env_task_group_status_reward(store_url):
    store = TrajectoryStore(store_url)
    store.put_many([make_episode(i) for i in range(12)])
    store.put_many([make_episode(100 + i, env="SQL-v0", run="r2", status="error", reward=0.0) for i in range(3)])
    assert store.count(env_id="SQL-v0") == 3
    assert store.count(run_id="r1", task_id="t1") == 3
    assert store.count(group_id="g0") == 4
    assert store.count(status="error") == 3 and store.count(failure="infra") == 3
    assert store.count(status=["complete", "error"]) == 15
    assert store.count(min_reward=0.5) == 6 and store.count(max_reward=0.5) == 9
    assert store.count(EpisodeFilter(env_id="Maze-v0", min_reward=1.0, task_id="t1")) == 3
    page = store.summaries(order_by="total_reward", descending=True, limit=5, offset=0)
    assert len(page) == 5 and all(r["total_reward"] == 1.0 for r in page)
    assert sorted(store.distinct("env_id")) == ["Maze-v0", "SQL-v0"]
    assert [e.id for e in store.iter_episodes(batch_size=4, env_id="Maze-v0")] == [f"ep{i:05d}" for i in range(12)]
    with pytest.raises(StoreError, match="cannot sort"):
        store.summaries(order_by="nope")


def test_missing_episode_is_a_clear_error(store_url):
    store = TrajectoryStore(store_url)
    with pytest.raises(StoreError, match="no episode with id 'nope'"):
        store.get("nope")


def test_runs_and_metrics(store_url):
    store = TrajectoryStore(store_url)
    store.log_run("r1", {"lr": 1e-3})
    for step in range(3):
        store.log_metrics("r1", step, {"reward_mean": step / 2})
    store.log_metrics("r1", 2, {"reward_mean": 9.0})
    assert [m["reward_mean"] for m in store.metrics("r1")] == [0.0, 0.5, 9.0]
    assert store.runs()[0]["config"] == {"lr": 1e-3}


def test_export_jsonl_loads_with_datasets(store_url, tmp_path):
    datasets = pytest.importorskip("datasets")
    store = TrajectoryStore(store_url)
    store.put_many([make_episode(i) for i in range(6)] + [make_episode(50, turns=0)])
    path = tmp_path / "eps.jsonl"
    assert store.export_jsonl(path) == 7
    ds = datasets.load_dataset("json", data_files=str(path), split="train")
    assert len(ds) == 7
    row = next(r for r in ds if r["id"] == "ep00001")
    assert row["turns"][0]["action_ids"] == [5, 6]
    assert json.loads(row["turns"][0]["info"])["nested"] == {"a": [1, 2]}
    assert row["total_reward"] == 1.0


@pytest.mark.parametrize("url,message", [
    ("mysql://root@localhost/x", "unsupported store backend 'mysql'"),
    ("postgresql://nobody@127.0.0.1:1/none", "cannot open store"),
    ("sqlite:////definitely/not/here/x.db", "does not exist"),
    ("not a url://x", "cannot parse store URL"),
])
def test_bad_store_urls_fail_clearly(url, message):
    with pytest.raises(StoreError, match=message):
        TrajectoryStore(url)


def test_plain_paths_are_sqlite_files(tmp_path):
    store = TrajectoryStore(tmp_path / "plain.db")
    store.put(make_episode(0))
    assert TrajectoryStore(str(tmp_path / "plain.db")).count() == 1


def test_older_schemas_are_refused(tmp_path):
    path = tmp_path / "old.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE episodes (id TEXT PRIMARY KEY)")
    with pytest.raises(StoreError, match="before schema versioning"):
        TrajectoryStore(path)
    newer = tmp_path / "newer.db"
    TrajectoryStore(newer)
    with sqlite3.connect(newer) as conn:
        conn.execute("UPDATE agentgym_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match="schema version 99"):
        TrajectoryStore(newer)


def test_create_false_refuses_an_empty_database(tmp_path):
    with pytest.raises(StoreError, match="holds no agentgym episodes"):
        TrajectoryStore(tmp_path / "empty.db", create=False)


def test_hostile_text_is_stored_without_crashing(store_url):
    store = TrajectoryStore(store_url)
    ep = Episode(id="hostile", turns=[Turn(observation="nul \x00 here", action_text="lone \ud800 surrogate",
                                           info={"bad": "\x00\udfff", "nan": float("nan"), "obj": object()})])
    store.put(ep)
    got = store.get("hostile").turns[0]
    assert got.observation == "nul \ufffd here" and got.action_text == "lone \\ud800 surrogate"
    assert got.info["bad"] == "\ufffd\\udfff" and got.info["nan"] is None and got.info["obj"].startswith("<object")


def test_many_processes_can_open_a_new_store_at_once(tmp_path):
    import multiprocessing

    url = f"sqlite:///{tmp_path / 'race.db'}"
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        counts = pool.map(_open_and_write, [(url, i) for i in range(8)])
    assert counts and TrajectoryStore(url).count() == 8


def _open_and_write(args):
    url, i = args
    store = TrajectoryStore(url)
    store.put(make_episode(i))
    return store.count()


@pytest.mark.postgres
def test_writes_and_reads_survive_the_server_terminating_their_connection(postgres_url):
    """`pg_terminate_backend` on the store's connection in the middle of a write, then of a read (the soak's
    store_disconnect): each is run again on a fresh connection (writes replace rows by key), nothing twice."""
    import sqlalchemy as sa

    store = TrajectoryStore(postgres_url)
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    killed, target = [], ["INSERT"]

    @sa.event.listens_for(store.engine, "before_cursor_execute")
    def terminate_once(conn, cursor, statement, parameters, context, executemany):
        if target and statement.lstrip().upper().startswith(target[0]) and "pg_backend_pid" not in statement:
            target.pop()
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            with admin.connect() as other:
                killed.append(other.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar())

    episodes = [make_episode(i) for i in range(3)]
    store.put_many(episodes)
    store.log_metrics("r1", 1, {"loss": 0.5})
    assert killed == [True]
    target.append("SELECT")
    assert [e.id for e in store.iter_episodes(run_id="r1")] == [e.id for e in episodes] and killed == [True, True]
    assert store.count(run_id="r1") == 3 and store.get(episodes[0].id).turns == episodes[0].turns
    assert [(m["step"], m["loss"]) for m in store.metrics("r1")] == [(1, 0.5)]
    admin.dispose()


@pytest.mark.postgres
def test_opening_a_store_survives_the_server_terminating_its_connection(postgres_url):
    """The soak's store_disconnect at the moment a trainer opens the store: the probe's connection, then the
    schema check's, is terminated by the server; the open goes on on fresh connections instead of failing."""
    import sqlalchemy as sa

    TrajectoryStore(postgres_url).close()  # the schema exists, so the open reads agentgym_meta
    admin = sa.create_engine(postgres_url, isolation_level="AUTOCOMMIT")
    killed, targets = [], ["SELECT 1", "SELECT agentgym_meta.value"]

    def terminate(conn, cursor, statement, parameters, context, executemany):
        if targets and statement.lstrip().startswith(targets[0]):
            targets.pop(0)
            pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
            with admin.connect() as other:
                killed.append(other.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar())

    sa.event.listen(sa.engine.Engine, "before_cursor_execute", terminate)
    try:
        store = TrajectoryStore(postgres_url)
    finally:
        sa.event.remove(sa.engine.Engine, "before_cursor_execute", terminate)
        admin.dispose()
    assert killed == [True, True]
    store.put(make_episode(0))
    assert store.get(make_episode(0).id) is not None
    store.close()


def test_a_store_that_refuses_connections_fails_at_once_with_the_reason():
    with pytest.raises(StoreError, match="cannot open store.*Check that the server is running"):
        TrajectoryStore("postgresql+psycopg://postgres@127.0.0.1:1/agentgym")
