"""Tools-v0 with Python tools: contract, formats, errors, and the solver through the CLI."""

import json

import pytest
from typer.testing import CliRunner

import agentgym
from agentgym import ConfigError, TrajectoryStore
from agentgym.cli import app
from agentgym.testing import AgentEnvContract


class TestToolsContract(AgentEnvContract):
    env_id = "Tools-v0"


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.fixture
def env():
    env = agentgym.make("Tools-v0", max_turns=30)
    env.reset(options={"task_id": "lookup-6"})  # 2-hop: person -> employer -> headquarters
    yield env
    env.close()


def test_a_multi_hop_episode(env):
    assert env.unwrapped.task.question.startswith("In which city is the headquarters")
    obs, _, _, _, info = env.step(call("kb_lookup", entity="Ilsa Marrow", attribute="employer"))
    assert '"content": "Norwind Labs"' in obs and obs.startswith("<tool_response>")
    assert info["tool_calls"] == [{"name": "kb_lookup", "arguments": {"entity": "Ilsa Marrow", "attribute": "employer"},
                                   "result": "Norwind Labs"}]
    env.step(call("kb_lookup", entity="Norwind Labs", attribute="headquarters"))
    obs, reward, terminated, truncated, info = env.step(call("answer", text="Lindholt"))
    assert (reward, terminated, truncated, obs) == (1.0, True, False, "Correct.")
    assert info["reward_terms"] == {"answer_match": 1.0}


def test_formats_openai_calls_parallel_calls_and_the_final_answer_marker(env):
    openai = json.dumps({"tool_calls": [
        {"type": "function", "function": {"name": "kb_search", "arguments": json.dumps({"query": "marrow"})}},
        {"type": "function", "function": {"name": "calculate", "arguments": json.dumps({"expression": "2+2"})}}]})
    obs, _, _, _, info = env.step(openai)
    assert obs.count("<tool_response>") == 2 and "Ilsa Marrow (person)" in obs and '"content": "4"' in obs
    _, reward, terminated, _, _ = env.step("I looked it up.\nFINAL ANSWER: lindholt")
    assert reward == 1.0 and terminated


def test_wrong_answers_score_zero(env):
    _, reward, terminated, _, info = env.step(call("answer", text="Kelport"))
    assert (reward, terminated, info["success"], info["expected"]) == (0.0, True, False, "Lindholt")


@pytest.mark.parametrize("action, kind", [
    ('<tool_call>{"name": "kb_lookup", "arguments": {"entity": </tool_call>', "malformed_action"),
    ('{"name": "kb_lookup", "arguments": {"entity": "x", "attribute": "y"', "malformed_action"),
    ('<tool_call>{"name": "kb_lookup", "arguments": "not json"}</tool_call>', "malformed_action"),
    (call("send_email", to="boss"), "unknown_tool"),
    (call("kb_lookup", entity=5, attribute="employer"), "invalid_arguments"),
    (call("kb_lookup", entity="Ilsa Marrow"), "invalid_arguments"),
    (call("kb_lookup", entity="Ilsa Marrow", attribute="employer", extra=1), "invalid_arguments"),
    (call("date_add", date="2024-01-01", days="three"), "invalid_arguments"),
    (call("date_add", date="2024-01-01", days=True), "invalid_arguments"),
    (call("answer"), "invalid_arguments"),
    (call("answer", text="x") + call("calculate", expression="1"), "malformed_action"),
    ("".join(call("calculate", expression="1") for _ in range(5)), "malformed_action"),
    ("I would like to think about this.", "malformed_action"),
])
def test_broken_calls_give_error_observations_and_the_episode_goes_on(env, action, kind):
    obs, reward, terminated, truncated, info = env.step(action)
    assert info["error_kind"] == kind and obs.startswith("Error:"), (action, obs)
    assert not (terminated or truncated) and reward == 0.0
    assert '"content": "Norwind Labs"' in env.step(call("kb_lookup", entity="Ilsa Marrow", attribute="employer"))[0]


def test_tools_that_raise_become_tool_errors(env):
    obs, _, terminated, _, info = env.step(call("kb_lookup", entity="Nobody", attribute="employer"))
    assert info["error_kind"] == "tool_error" and '"error": "kb_lookup raised KeyError: no entity named' in obs
    obs, _, _, _, info = env.step(call("calculate", expression="1/0"))
    assert "division by zero" in obs and not terminated
    obs, _, _, _, info = env.step(call("calculate", expression="9" * 600))
    assert info["error_kind"] == "tool_error" and "limit is 500" in obs


def test_megabyte_actions_and_invalid_unicode(env):
    obs, _, _, _, info = env.step("x" * 1_048_576)
    assert info["error_kind"] == "action_too_long"
    obs, _, _, _, info = env.step(call("kb_search", query="\ud800fen") + "\udcff")
    assert info["replaced_surrogates"] == 2 and "error_kind" not in info  # one raw, one JSON-escaped
    obs, _, _, _, info = env.step(call("kb_lookup", entity="\ud800", attribute="employer"))
    assert info["error_kind"] == "tool_error"
    assert env.step(call("answer", text="Lindholt\udcff"))[2]


def test_turn_limit_truncates_with_a_reason():
    env = agentgym.make("Tools-v0", max_turns=2)
    env.reset(options={"task_id": "arithmetic-0"})
    env.step(call("calculate", expression="1"))
    _, _, terminated, truncated, info = env.step(call("calculate", expression="1"))
    assert truncated and not terminated and "turn limit of 2" in info["truncation_reason"]
    env.close()


def my_tool(word: str, times: int = 2) -> str:
    """Repeat a word.

    Args:
        word: the word.
        times: how often.
    """
    return word * times


def test_user_functions_and_task_files(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "echo-1", "question": "Say ha three times.", "answer": "hahaha",
                                 "plan": [{"tool": "my_tool", "arguments": {"word": "ha", "times": 3}}]}) + "\n")
    env = agentgym.make("Tools-v0", task_sets=[], functions=[f"{__name__}:my_tool"], tasks_file=str(tasks))
    assert env.unwrapped.task_ids() == ["echo-1"]
    assert [t["function"]["name"] for t in env.unwrapped.tools()] == ["my_tool", "answer"]
    env.reset(options={"task_id": "echo-1"})
    assert '"content": "hahaha"' in env.step(env.unwrapped.solver_action())[0]
    assert env.step(env.unwrapped.solver_action())[1] == 1.0
    env.close()
    tasks.write_text("{not json}\n")
    with pytest.raises(ConfigError, match="line 1"):
        agentgym.make("Tools-v0", tasks_file=str(tasks))
    with pytest.raises(ConfigError, match="unknown Tools-v0 task set"):
        agentgym.make("Tools-v0", task_sets=["poetry"])


def test_solver_scores_100_percent_on_every_task_through_the_cli(tmp_path):
    n = len(agentgym.make("Tools-v0").unwrapped.task_ids())
    store = str(tmp_path / "t.db")
    result = CliRunner().invoke(app, ["rollout", "Tools-v0", "--policy", "solver", "-n", str(n), "--store", store],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    episodes = TrajectoryStore(store).episodes()
    assert len(episodes) == n >= 100 and all(e.total_reward == 1.0 for e in episodes)
