"""Hostile and broken input to SQL-v0: each gets an error observation, and no database ever changes."""

import json
import sqlite3

import pytest

import agentgym


def call(name: str, query: str) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": {"query": query}}) + "</tool_call>"


@pytest.fixture
def env(sql_data_dir):
    env = agentgym.make("SQL-v0", data_dir=sql_data_dir, max_turns=50, timeout_s=1.0)
    env.reset(options={"task_id": "shop-easy-0"})
    yield env
    env.close()


DESTRUCTIVE = [
    "DROP TABLE customers",
    "DELETE FROM orders",
    "UPDATE products SET price = 0",
    "INSERT INTO customers (id, name) VALUES (999, 'x')",
    "CREATE TABLE evil (x)",
    "CREATE TEMP TABLE evil (x)",
    "ALTER TABLE customers ADD COLUMN y",
    "ATTACH DATABASE '/tmp/agentgym-evil.db' AS evil",
    "DETACH DATABASE main",
    "PRAGMA journal_mode = DELETE",
    "PRAGMA writable_schema = 1",
    "VACUUM INTO '/tmp/agentgym-evil-copy.db'",
    "REPLACE INTO products (id, name) VALUES (1, 'x')",
    "WITH x AS (SELECT 1) DELETE FROM customers",
    "BEGIN; DROP TABLE customers; COMMIT",
    "SELECT 1; DROP TABLE customers",
    "SELECT * FROM customers WHERE name = '' OR 1=1; DROP TABLE customers; --'",
    "SELECT load_extension('/tmp/evil.so')",
]


@pytest.mark.parametrize("query", DESTRUCTIVE)
def test_destructive_statements_are_refused_and_nothing_changes(env, taskset, digest, query, tmp_path):
    before = {db: digest(path) for db, path in taskset.db_paths.items()}
    for action in (call("execute_sql", query), query):
        obs, reward, terminated, truncated, info = env.step(action)
        assert info["error_kind"] in ("refused", "sql_error"), (query, obs)
        assert not terminated and reward == 0.0
        assert obs.startswith(("Refused:", "SQL error:"))
    obs, _, _, _, info = env.step(call("execute_sql", "SELECT COUNT(*) FROM customers"))
    assert "120" in obs and "error_kind" not in info
    assert {db: digest(path) for db, path in taskset.db_paths.items()} == before
    assert not (tmp_path / "agentgym-evil-copy.db").exists()


def test_refusals_say_which_rule_was_broken(env):
    assert "multiple statements are not allowed" in env.step(call("execute_sql", "SELECT 1; SELECT 2"))[0]
    assert "attaching databases is not allowed" in env.step(call("execute_sql", "ATTACH 'x' AS y"))[0]
    assert "read-only" in env.step(call("execute_sql", "DROP TABLE customers"))[0]
    assert "not allowed" in env.step(call("execute_sql", "PRAGMA journal_mode = DELETE"))[0]


def test_injection_inside_a_literal_stays_a_literal(env):
    obs, _, _, _, info = env.step(call("execute_sql", "SELECT COUNT(*) FROM customers WHERE name = 'x''; DROP TABLE customers; --'"))
    assert "error_kind" not in info and "0" in obs


def test_a_submitted_destructive_query_scores_zero_and_ends(env, taskset, digest):
    before = digest(taskset.db_paths["shop"])
    obs, reward, terminated, _, info = env.step(call("submit", "DELETE FROM customers"))
    assert terminated and reward == 0.0 and info["error_kind"] == "refused"
    assert digest(taskset.db_paths["shop"]) == before


def test_huge_results_are_capped_in_rows_and_characters(env):
    obs, _, _, _, info = env.step(call("execute_sql", "SELECT * FROM customers a, customers b, customers c"))
    assert info["more_rows"] and info["rows"] == 20
    assert len(obs) <= 4200 and "showing the first" in obs
    obs, _, _, _, info = env.step(call("execute_sql", "SELECT randomblob(500000000)"))
    assert info["error_kind"] == "sql_error" and "too big" in obs


def test_a_statement_that_never_ends_times_out_and_the_episode_goes_on(env):
    never = "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT COUNT(*) FROM c"
    obs, _, terminated, truncated, info = env.step(call("execute_sql", never))
    assert info["error_kind"] == "timeout" and obs.startswith("Timeout:") and not (terminated or truncated)
    assert "120" in env.step(call("execute_sql", "SELECT COUNT(*) FROM customers"))[0]
    _, reward, terminated, _, info = env.step(call("submit", never))
    assert terminated and reward == 0.0 and info["error_kind"] == "timeout"


def test_invalid_unicode_nul_bytes_and_megabyte_actions(env):
    obs, _, _, _, info = env.step(call("execute_sql", "SELECT '\ud800' AS bad"))
    assert info["replaced_surrogates"] == 1 and "error_kind" not in info and "\ufffd" in obs
    obs, _, _, _, info = env.step("SELECT 1 \udcff\udcfe")
    assert info["replaced_surrogates"] == 2
    obs, _, _, _, info = env.step(call("execute_sql", "SELECT 'a\x00b'"))
    assert info["error_kind"] == "refused" and "NUL" in obs
    obs, _, _, _, info = env.step("SELECT " + "1 + " * 262_144 + "1")
    assert info["error_kind"] == "action_too_long" and "1,048," in obs
    obs, _, _, _, info = env.step(call("execute_sql", "SELECT '" + "x" * 30_000 + "'"))
    assert info["error_kind"] == "refused" and "limit is 20,000" in obs
    obs, _, _, _, info = env.step(b"\xff\xfe SELECT".decode("utf-8", errors="surrogateescape"))
    assert "error_kind" in info
    assert "120" in env.step(call("execute_sql", "SELECT COUNT(*) FROM customers"))[0]


def test_broken_tool_calls_give_error_observations(env):
    for action, kind in [('<tool_call>{"name": "execute_sql", "arguments": {"query": </tool_call>', "malformed_action"),
                         ('<tool_call>{"name": "drop_db", "arguments": {}}</tool_call>', "unknown_tool"),
                         ('<tool_call>{"name": "execute_sql", "arguments": {"query": 5}}</tool_call>', "invalid_arguments"),
                         ('<tool_call>{"name": "submit", "arguments": {}}</tool_call>', "invalid_arguments"),
                         ("I think the answer is 42.", "malformed_action"),
                         ("SUBMIT: no sql here", "malformed_action")]:
        obs, _, terminated, _, info = env.step(action)
        assert info["error_kind"] == kind and obs.startswith("Error:") and not terminated, action


def test_two_episodes_never_see_each_other(sql_data_dir, taskset, digest):
    a = agentgym.make("SQL-v0", data_dir=sql_data_dir)
    b = agentgym.make("SQL-v0", data_dir=sql_data_dir)
    a.reset(options={"task_id": "hr-easy-0"})
    b.reset(options={"task_id": "hr-easy-0"})
    a.step(call("execute_sql", "DELETE FROM employees"))
    a.step(call("execute_sql", "CREATE TEMP TABLE employees (id INTEGER)"))
    obs, _, _, _, _ = b.step(call("execute_sql", "SELECT COUNT(*) AS n FROM employees"))
    assert "130" in obs
    conn = sqlite3.connect(taskset.db_paths["hr"])
    assert conn.execute("SELECT COUNT(*) FROM employees").fetchone() == (130,)
    conn.close()
    a.close()
    b.close()
