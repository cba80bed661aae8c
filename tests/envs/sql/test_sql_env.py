"""SQL-v0 end to end: the contract, every reply format, rewards, turn limit, and the solver through the CLI."""

import json

import pytest
from typer.testing import CliRunner

import agentgym
from agentgym import TrajectoryStore
from agentgym.cli import app
from agentgym.testing import AgentEnvContract


class TestSqlContract(AgentEnvContract):
    env_id = "SQL-v0"


class TestSqlExploringSolverContract(AgentEnvContract):
    env_id = "SQL-v0"
    env_kwargs = {"solver_explores": True, "difficulty": "hard", "bare_sql": "submit"}


def call(name: str, query: str) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": {"query": query}}) + "</tool_call>"


@pytest.fixture
def env(sql_data_dir):
    env = agentgym.make("SQL-v0", data_dir=sql_data_dir, max_turns=6)
    yield env
    env.close()


def test_first_observation_has_schema_and_question(env):
    obs, info = env.reset(options={"task_id": "shop-easy-0"})
    assert info == {"task_id": "shop-easy-0", "db_id": "shop", "difficulty": "easy", "dialect": "sqlite"}
    assert "customers(id INTEGER PRIMARY KEY" in obs and "foreign keys: customer_id -> customers.id" in obs
    assert obs.endswith("Question: How many customers live in Lisbon?")
    assert {t["function"]["name"] for t in env.unwrapped.tools()} == {"execute_sql", "submit"}


def test_every_reply_format_is_understood(env):
    env.reset(options={"task_id": "shop-easy-0"})
    obs, _, _, _, info = env.step(call("execute_sql", "SELECT COUNT(*) AS n FROM customers"))
    assert info["action_source"] == "tool:hermes" and "n" in obs and "120" in obs and "(1 row)" in obs
    openai = json.dumps({"tool_calls": [{"type": "function", "function": {
        "name": "execute_sql", "arguments": json.dumps({"query": "SELECT 1 AS one"})}}]})
    assert env.step(openai)[4]["action_source"] == "tool:openai"
    _, _, terminated, _, info = env.step("Let me look.\n```sql\nSELECT city FROM customers LIMIT 2\n```")
    assert info["action_source"] == "fence" and info["action_kind"] == "explore" and not terminated
    _, _, _, _, info = env.step("select name from products limit 1")
    assert info["action_source"] == "plain" and info["rows"] == 1
    obs, reward, terminated, truncated, info = env.step(
        "I am sure now.\nSUBMIT:\n```sql\nSELECT COUNT(*) FROM customers WHERE city = 'Lisbon'\n```")
    assert (reward, terminated, truncated) == (1.0, True, False) and info["action_source"] == "marker"
    assert info["reward_terms"] == {"execution_match": 1.0, "valid_sql": 1.0, "exploration": 1.0}
    assert "matches" in obs


def test_wrong_and_failing_submissions_score_zero_with_reasons(env):
    env.reset(options={"task_id": "shop-easy-1"})
    obs, reward, terminated, _, info = env.step(call("submit", "SELECT name FROM products"))
    assert (reward, terminated, info["success"]) == (0.0, True, False) and "rows returned" in info["match_reason"]
    env.reset(options={"task_id": "shop-easy-1"})
    obs, reward, terminated, _, info = env.step(call("submit", "SELECT nme FROM products"))
    assert reward == 0.0 and terminated and info["error_kind"] == "sql_error" and "no such column" in obs
    assert info["reward_terms"]["valid_sql"] == 0.0


def test_optional_reward_terms_are_weighted_and_reported(sql_data_dir):
    env = agentgym.make("SQL-v0", data_dir=sql_data_dir, format_reward=0.1, exploration_reward=0.2)
    env.reset(options={"task_id": "hr-easy-0"})
    env.step(call("execute_sql", "SELECT title FROM employees LIMIT 1"))
    _, reward, _, _, info = env.step(call("submit", "SELECT 1"))
    assert reward == pytest.approx(0.3) and info["reward_terms"] == {
        "execution_match": 0.0, "valid_sql": 1.0, "exploration": 1.0}
    env.close()


def test_order_matters_only_when_the_gold_query_orders(env):
    env.reset(options={"task_id": "school-hard-10"})  # ranked departments: ORDER BY n DESC
    gold = env.unwrapped.task.gold
    assert "ORDER BY" in gold
    reversed_order = gold.replace("ORDER BY n DESC", "ORDER BY n ASC")
    _, reward, _, _, info = env.step(call("submit", reversed_order))
    assert reward == 0.0 and info["ordered"]
    env.reset(options={"task_id": "shop-medium-8"})  # GROUP BY without ORDER BY
    _, reward, _, _, _ = env.step(call("submit", "SELECT category, COUNT(*) FROM products GROUP BY category "
                                                 "ORDER BY category DESC"))
    assert reward == 1.0


def test_turn_limit_truncates_with_a_reason(env):
    env.reset(options={"task_id": "library-easy-0"})
    for _turn in range(6):
        _, reward, terminated, truncated, info = env.step(call("execute_sql", "SELECT 1"))
    assert (reward, terminated, truncated) == (0.0, False, True)
    assert "turn limit of 6" in info["truncation_reason"]
    with pytest.raises(RuntimeError, match="ended"):
        env.step("SELECT 1")


def test_snapshot_restore_forks_an_episode(env):
    env.reset(options={"task_id": "flights-easy-0"})
    env.step(call("execute_sql", "SELECT code FROM airports LIMIT 1"))
    token = env.unwrapped.snapshot()
    assert env.step(call("submit", env.unwrapped.task.gold))[1] == 1.0
    env.unwrapped.restore(token)
    assert env.step(call("submit", "SELECT 0"))[1] == 0.0


def test_solver_scores_100_percent_on_every_task_through_the_cli(tmp_path):
    tasks = agentgym.make("SQL-v0").unwrapped.task_ids()
    store = str(tmp_path / "roll.db")
    result = CliRunner().invoke(app, ["rollout", "SQL-v0", "--policy", "solver", "-n", str(len(tasks)),
                                      "--store", store, "--env-kwargs", '{"solver_explores": true}'],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    episodes = TrajectoryStore(store).episodes()
    assert len(episodes) == len(tasks) >= 200
    assert {e.task_id for e in episodes} == set(tasks)
    assert all(e.total_reward == 1.0 and e.status == "complete" and e.num_turns == 2 for e in episodes)
    assert "100.0%" in result.output
