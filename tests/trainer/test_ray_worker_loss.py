"""A dead rollout worker's share of the data stream is settled when Ray restarts it (DataManagerActor.recover).

The actor body is a plain class, so this runs without a cluster, on a real SQLite store: the dead
incarnation's in-flight episodes end as infra failures with the reason, its stored episodes are pushed
once, the rollouts it never started and the retries it took but never started are owed again, and its
in-flight slots are given back; another worker's slots and groups are untouched.
"""

from __future__ import annotations

from agentgym.trainer.ray_runtime.data_actor import IN_FLIGHT_AT_WORKER_LOSS, OWNER_KEY, DataManagerActor

from agentgym.store import TrajectoryStore
from agentgym.trajectory import Episode, EpisodeStatus, Failure, Turn

RUN = "loss"


def episode(group: str, owner: str, *, status: EpisodeStatus = EpisodeStatus.COMPLETE, reward: float = 0.0,
            in_flight: bool = False, failure: Failure | None = None) -> Episode:
    meta = {OWNER_KEY: owner, **({"in_flight": True} if in_flight else {})}
    turns = [] if in_flight else [Turn(observation="o", action_text="a", reward=reward, terminated=True)]
    return Episode(run_id=RUN, env_id="Maze-v0", task_id=f"task-{group}", seed=7, group_id=group, status=status,
                   failure=failure, error="env died" if failure else None, total_reward=reward, turns=turns,
                   metadata=meta)


def test_a_dead_workers_in_flight_episodes_end_as_infra_and_its_groups_are_owed_their_rollouts(tmp_path):
    url = f"sqlite:///{tmp_path / 'episodes.db'}"
    store = TrajectoryStore(url)
    actor = DataManagerActor({"batch_groups": 1, "group_size": 4, "max_in_flight": 16})
    dead, alive = "rollout-0-111-aaaaaa", "rollout-1-222-bbbbbb"

    # a group of the live worker, pushed with one infra failure: its retry is taken by the worker that dies
    assert actor.try_acquire(4, alive)
    known = [episode("H", alive, reward=r) for r in (0.0, 1.0, 0.0)] + [
        episode("H", alive, status=EpisodeStatus.TRUNCATED, failure=Failure.INFRA)]
    store.put_many(known)
    actor.expect_group("H", "task-H", 4)
    for e in known:
        actor.push(e, True, alive)
    [retry] = actor.take_retries(dead)
    assert retry.group_id == "H"

    # the dead worker's own new group G: 2 episodes in flight, 1 finished, 1 never reset (not in the store)
    assert actor.try_acquire(4, dead)
    g = [episode("G", dead, status=EpisodeStatus.PARTIAL, in_flight=True) for _ in range(2)]
    g.append(episode("G", dead, reward=1.0))
    store.put_many(g)
    assert actor.try_acquire(4, alive)  # the live worker's group in flight: its slots stay held

    settled = actor.recover(dead, url, RUN)
    assert settled == {"ended_in_flight": 2, "stored": 3, "owed": 2}  # H's retry, G's rollout that never started

    stored = {e.id: e for e in store.iter_episodes(run_id=RUN)}
    for e in g[:2]:
        ended = stored[e.id]
        assert (ended.status, ended.failure, ended.error) == (EpisodeStatus.ERROR, Failure.INFRA,
                                                              IN_FLIGHT_AT_WORKER_LOSS)
        assert "in_flight" not in ended.metadata
    assert actor.metrics().in_flight == 4  # the dead worker's 4 slots given back, the live worker's 4 held
    retries = actor.take_retries(alive)
    # G: 2 retries for the ended episodes + 1 for the rollout never started; H: the retry never started
    assert sorted(r.group_id for r in retries) == ["G", "G", "G", "H"]
    assert actor.recover(dead, url, RUN)["owed"] == 0  # settled once: nothing left to owe

    # the retries complete both groups; nothing infra is in the batch
    for r in retries:
        done = episode(r.group_id, alive, reward=0.5)
        store.put_many([done])
        actor.push(done, False, alive)
    batch = actor.pull(None, 0, False)
    assert batch is not None and all(e.failure != Failure.INFRA for e in batch.episodes)
    assert len(batch.episodes) == 4


def test_a_retry_out_with_a_worker_is_not_a_stall_even_while_that_worker_restarts(tmp_path):
    """CI saw a run fail with CollectionStalled: two groups at 3/4 held the in-flight limit while their retries
    were out with a rollout worker that had died and was being restarted. Retries take no in-flight slot, so
    the data manager alone saw "nothing in flight"; a retry out with any worker (running, or owed again by
    `recover`) means the groups can still complete."""
    url = f"sqlite:///{tmp_path / 'episodes.db'}"
    store = TrajectoryStore(url)
    actor = DataManagerActor({"batch_groups": 2, "group_size": 4, "max_in_flight": 8})
    dead, alive = "rollout-0-111-aaaaaa", "rollout-1-222-bbbbbb"
    for group in ("G1", "G2"):
        assert actor.try_acquire(4, alive)
        pushed = [episode(group, alive, reward=r) for r in (0.0, 1.0, 0.0)] + [
            episode(group, alive, status=EpisodeStatus.TRUNCATED, failure=Failure.INFRA)]
        store.put_many(pushed)
        actor.expect_group(group, f"task-{group}", 4)
        for e in pushed:
            actor.push(e, True, alive)
    assert not actor.try_acquire(4, alive)  # 6 queued episodes + a new group of 4 > 8: only the retries can help
    assert sorted(r.group_id for r in actor.take_retries(dead)) == ["G1", "G2"]
    assert actor.stalled() is None  # the retries are out with `dead`: running, or owed again when it rejoins

    assert actor.recover(dead, url, RUN)["owed"] == 2  # it died before starting them
    assert actor.stalled() is None
    retries = actor.take_retries(alive)
    assert actor.stalled() is None  # out with `alive` now
    for r in retries:
        done = episode(r.group_id, alive, reward=0.5)
        store.put_many([done])
        actor.push(done, False, alive)
    batch = actor.pull(None, 0, False)
    assert batch is not None and len(batch.episodes) == 8 and actor.stalled() is None


def test_groups_that_no_retry_can_complete_are_still_named_as_a_stall():
    actor = DataManagerActor({"batch_groups": 2, "group_size": 4, "max_in_flight": 8})
    owner = "rollout-0-111-aaaaaa"
    for group in ("G1", "G2"):
        assert actor.try_acquire(3, owner)
        actor.expect_group(group, f"task-{group}", 4)
        for r in (0.0, 1.0, 0.0):
            actor.push(episode(group, owner, reward=r), True, owner)
    stall = actor.stalled()
    assert stall is not None and "held by 6 queued episodes of 2 groups" in stall and "'G1': '3/4'" in stall
