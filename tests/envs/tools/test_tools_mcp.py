"""Tools-v0 with real MCP servers over stdio: mcp-server-time from PyPI, and a server that crashes or hangs.

Needs the `mcp` SDK (agentgym[tools]) and the `mcp-server-time` package, installed by the dev setup.
"""

import json
import sys
from pathlib import Path

import pytest
from agentgym.envs.tools.mcp_client import McpServer, McpServerSpec, ToolServerError

import agentgym
from agentgym.checker import check_env_contract
from agentgym.errors import EnvInfraError

pytestmark = pytest.mark.timeout(180)
CRASHING = {"command": sys.executable, "args": [str(Path(__file__).with_name("crashing_server.py"))],
            "name": "crashing"}
TIMEZONES = {"task_sets": ["timezones"]}


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.fixture(scope="module")
def time_env():
    env = agentgym.make("Tools-v0", **TIMEZONES)
    yield env
    env.close()


def test_the_time_server_is_launched_and_its_tools_are_offered(time_env):
    names = [t["function"]["name"] for t in time_env.unwrapped.tools()]
    assert names[-3:] == ["get_current_time", "convert_time", "answer"]
    schema = time_env.unwrapped.tools()[-2]["function"]["parameters"]
    assert schema["required"] == ["source_timezone", "time", "target_timezone"]
    assert time_env.unwrapped.deterministic is False


def test_solver_converts_every_timezone_task_through_the_real_server(time_env):
    from agentgym.policy.simple import solver_policy
    from agentgym.single_episode import run_episode

    for task_id in time_env.unwrapped.task_ids():
        episode = run_episode(time_env, solver_policy, task_id=task_id, max_turns=4)
        assert episode.total_reward == 1.0, (task_id, episode.turns[-1].info)
        assert '"target"' in episode.turns[1].observation


def test_server_errors_and_schema_violations_are_error_observations(time_env):
    time_env.reset(options={"task_id": "timezones-0"})
    obs, _, _, _, info = time_env.step(call("convert_time", source_timezone="Mars/Olympus", time="10:00",
                                            target_timezone="UTC"))
    assert info["error_kind"] == "tool_error" and "Invalid timezone" in obs
    obs, _, _, _, info = time_env.step(call("convert_time", source_timezone="UTC", time=1000, target_timezone="UTC"))
    assert info["error_kind"] == "invalid_arguments"
    obs, _, _, _, info = time_env.step(call("convert_time", source_timezone="UTC\ud800", time="10:00",
                                            target_timezone="UTC"))
    assert info["error_kind"] == "tool_error" and info["replaced_surrogates"] == 1 and "Invalid timezone" in obs
    assert time_env.unwrapped.toolbox.call  # the server survived: the next call works
    obs, _, terminated, truncated, info = time_env.step(call("convert_time", source_timezone="UTC", time="10:00",
                                                             target_timezone="Asia/Tokyo"))
    assert "19:00" in obs and not (terminated or truncated)


def test_contract_with_an_mcp_server():
    report = check_env_contract("Tools-v0", lambda: agentgym.make("Tools-v0", **TIMEZONES))
    assert report.passed, [(r.name, r.detail) for r in report.failures()]


def test_a_server_that_crashes_mid_episode_is_an_infra_error_and_restarts_on_reset():
    env = agentgym.make("Tools-v0", task_sets=["arithmetic"], mcp_servers=[CRASHING])
    env.reset(options={"task_id": "arithmetic-0"})
    obs, _, _, _, info = env.step(call("echo", text="still here"))
    assert '"content": "still here"' in obs
    with pytest.raises(EnvInfraError) as raised:
        env.step(call("crash"))
    assert raised.value.kind == "tool_server_crashed"
    assert "closed the connection" in raised.value.reason and "crash" in raised.value.reason
    with pytest.raises(RuntimeError, match="ended"):
        env.step(call("echo", text="x"))
    env.reset(options={"task_id": "arithmetic-0"})  # a fresh server process
    assert '"content": "back"' in env.step(call("echo", text="back"))[0]
    env.close()
    env.close()


def test_a_server_that_hangs_is_an_infra_error_after_the_call_timeout():
    env = agentgym.make("Tools-v0", task_sets=["arithmetic"], mcp_servers=[CRASHING], call_timeout_s=1.0)
    env.reset(options={"task_id": "arithmetic-1"})
    with pytest.raises(EnvInfraError, match="did not answer hang within 1 s"):
        env.step(call("hang"))
    env.close()


def test_servers_that_cannot_start_say_why():
    with pytest.raises(agentgym.ConfigError, match="was not found"):
        agentgym.make("Tools-v0", mcp_servers=[{"command": "no-such-mcp-server-xyz"}]).reset()
    with pytest.raises(ToolServerError, match="failed to start"):
        McpServer(McpServerSpec(sys.executable, ("-c", "import sys; sys.exit(2)"), name="dies"), call_timeout_s=2)
    with pytest.raises(agentgym.ConfigError, match="unknown MCP server key"):
        agentgym.make("Tools-v0", mcp_servers=[{"command": "x", "argv": []}])
