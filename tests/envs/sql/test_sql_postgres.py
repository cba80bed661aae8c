"""SQL-v0 on the local PostgreSQL server: same tasks, same answers, read-only, reader role, timeout."""

import json
import uuid

import pytest
import sqlalchemy as sa
from agentgym.envs.sql.postgres import schema_name
from typer.testing import CliRunner

import agentgym
from agentgym import ConfigError, TrajectoryStore
from agentgym.checker import check_env_contract
from agentgym.cli import app
from agentgym.errors import EnvInfraError

pytestmark = pytest.mark.postgres


@pytest.fixture(scope="module")
def pg_url(postgres_server):
    """A fresh database for this module (the generated domains get loaded into it by the env)."""
    name = f"agentgym_sqlenv_{uuid.uuid4().hex[:10]}"
    admin = sa.create_engine(postgres_server, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.engine.make_url(postgres_server).set(database=name, drivername="postgresql")
    yield url.render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def call(name: str, query: str) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": {"query": query}}) + "</tool_call>"


@pytest.fixture
def env(pg_url, sql_data_dir):
    env = agentgym.make("SQL-v0", dialect="postgresql", url=pg_url, data_dir=sql_data_dir, timeout_s=2.0,
                        max_turns=50)
    env.reset(options={"task_id": "shop-easy-0"})
    yield env
    env.close()


def table_counts(pg_url: str) -> dict[str, int]:
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.connect() as conn:
        counts = {t: conn.execute(sa.text(f"SELECT COUNT(*) FROM {schema_name('shop')}.{t}")).scalar()
                  for t in ("customers", "products", "orders", "order_items")}
    engine.dispose()
    return counts


def test_contract_on_postgres(pg_url, sql_data_dir):
    report = check_env_contract("SQL-v0", lambda: agentgym.make("SQL-v0", dialect="postgresql", url=pg_url,
                                                                data_dir=sql_data_dir))
    assert report.passed, [(r.name, r.detail) for r in report.failures()]


def test_solver_scores_100_percent_on_postgres_through_the_cli(pg_url, tmp_path):
    kwargs = json.dumps({"dialect": "postgresql", "url": pg_url})
    n = len(agentgym.make("SQL-v0").unwrapped.task_ids())
    store = str(tmp_path / "pg.db")
    result = CliRunner().invoke(app, ["rollout", "SQL-v0", "--env-kwargs", kwargs, "--policy", "solver",
                                      "-n", str(n), "--store", store], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    episodes = TrajectoryStore(store).episodes()
    assert len(episodes) == n and all(e.total_reward == 1.0 for e in episodes)


@pytest.mark.parametrize("query", [
    "DROP TABLE customers", "DELETE FROM orders", "UPDATE products SET price = 0", "TRUNCATE customers",
    "CREATE TABLE evil (x int)", "SET TRANSACTION READ WRITE", "SELECT 1; DROP TABLE customers",
    "COPY (SELECT 1) TO PROGRAM 'touch /tmp/agentgym-evil'", "WITH d AS (DELETE FROM orders RETURNING *) SELECT * FROM d",
    "SELECT set_config('role', 'postgres', false)", "SELECT pg_read_file('/etc/hostname')",
    "SELECT * FROM pg_authid", "RESET ROLE", "COMMIT", "SET search_path TO public",
])
def test_destructive_and_escalating_statements_fail_and_nothing_changes(env, pg_url, query):
    before = table_counts(pg_url)
    obs, reward, terminated, _, info = env.step(call("execute_sql", query))
    assert info["error_kind"] in ("refused", "sql_error") and not terminated, (query, obs)
    assert "120" in env.step(call("execute_sql", "SELECT COUNT(*) FROM customers"))[0]
    assert table_counts(pg_url) == before


def test_the_reader_sees_only_the_task_schemas(env, pg_url):
    engine = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://"))
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE IF NOT EXISTS public.secrets (v text)"))
        conn.execute(sa.text("INSERT INTO public.secrets VALUES ('gold answers')"))
    engine.dispose()
    obs, _, _, _, info = env.step(call("execute_sql", "SELECT * FROM public.secrets"))
    assert info["error_kind"] == "sql_error" and "permission denied" in obs
    obs, _, _, _, _ = env.step(call("execute_sql", "SELECT current_user, session_user"))
    assert obs.count("agentgym_sql_reader") == 2


def test_timeouts_huge_results_and_bad_text_on_postgres(env):
    obs, _, _, _, info = env.step(call("execute_sql", "SELECT pg_sleep(30)"))
    assert info["error_kind"] == "timeout"
    obs, _, _, _, info = env.step(call("execute_sql", "SELECT a.id FROM customers a, customers b, customers c"))
    assert info["more_rows"] and info["rows"] == 20 and "showing the first 20" in obs
    obs, _, _, _, info = env.step(call("execute_sql", "SELECT 'a\x00b'"))
    assert info["error_kind"] == "refused"
    obs, _, _, _, info = env.step(call("execute_sql", "SELECT '\ud800' AS s"))
    assert info["replaced_surrogates"] == 1 and "\ufffd" in obs
    obs, _, _, _, info = env.step(call("execute_sql", "SELECT name FROM customers WHERE name LIKE 'A%' LIMIT 1"))
    assert "error_kind" not in info and "(1 row)" in obs


def test_unreachable_server_is_a_config_error(sql_data_dir):
    with pytest.raises(ConfigError, match="cannot reach PostgreSQL"):
        agentgym.make("SQL-v0", dialect="postgresql", url="postgresql://postgres@127.0.0.1:1/none",
                      data_dir=sql_data_dir)
    with pytest.raises(ConfigError, match="needs url"):
        agentgym.make("SQL-v0", dialect="postgresql")


def test_a_lost_server_connection_is_an_infra_error_and_the_next_episode_reconnects(env, pg_url):
    assert "120" in env.step(call("execute_sql", "SELECT COUNT(*) FROM customers"))[0]
    database = sa.engine.make_url(pg_url).database
    admin = sa.create_engine(pg_url.replace("postgresql://", "postgresql+psycopg://"))
    with admin.begin() as conn:  # ends the episode's own server process (the reader role's session)
        killed = conn.execute(sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                                      "WHERE usename = 'agentgym_sql_reader' AND datname = :d"), {"d": database}).all()
    admin.dispose()
    assert killed
    with pytest.raises(EnvInfraError, match="unavailable") as raised:
        env.step(call("execute_sql", "SELECT 1"))
    assert raised.value.kind == "database_unavailable"
    env.reset(options={"task_id": "shop-easy-0"})
    assert "120" in env.step(call("execute_sql", "SELECT COUNT(*) FROM customers"))[0]
