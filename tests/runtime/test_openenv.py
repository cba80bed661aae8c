"""The OpenEnv adapter against a real OpenEnv server: the echo env that `openenv init` (openenv-core, PyPI)
generates, served by OpenEnv's own FastAPI app under uvicorn, started by the test.

The policy is scripted (labelled): it says a fixed sentence.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agentgym.checker import check_env_contract
from agentgym.errors import EnvInfraError
from agentgym.launch import free_port, launch
from agentgym.runtime.openenv import OpenEnvEnv, render_observation
from agentgym.single_episode import run_episode

pytest.importorskip("openenv.core")
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("openenv")
    openenv = Path(sys.executable).with_name("openenv")
    subprocess.run([str(openenv), "init", "echo_env"], cwd=root, check=True, capture_output=True, timeout=120)
    port = free_port()
    with launch([sys.executable, "-m", "uvicorn", "server.app:app", "--port", str(port)], port,
                what="the OpenEnv echo server", timeout_s=90, cwd=root / "echo_env",
                env={"PYTHONPATH": str(root / "echo_env")}) as server:
        yield server.url, server


def test_an_openenv_server_is_an_agentgym_env(echo_server):
    url, _ = echo_server
    env = OpenEnvEnv(url)
    assert env.text_field == "message" and env.action_format == "free_text"
    obs, info = env.reset(seed=0)
    assert "environment ready" in obs and info["openenv_observation"]["message_length"] == 0
    obs, reward, terminated, truncated, info = env.step("hello there")
    assert obs.startswith("hello there") and "message_length: 11" in obs
    assert reward == pytest.approx(1.1) and not terminated and not truncated  # the echo env's reward: 0.1 per char
    episode = run_episode(env, lambda messages, env: "ping", max_turns=3)
    assert [t.reward for t in episode.turns] == pytest.approx([0.4, 0.4, 0.4])
    env.close()
    env.close()


def test_envs_check_passes_through_the_adapter(echo_server):
    url, _ = echo_server
    report = check_env_contract("openenv-echo", lambda: OpenEnvEnv(url))
    assert report.passed, [(r.name, r.detail) for r in report.failures()]


def test_observations_render_as_text():
    assert render_observation({"text": "hi", "done": False, "reward": 1.0}) == "hi"
    assert render_observation({"a": 1, "b": [1, 2]}) == "a: 1\nb: [1, 2]"


def test_a_dead_openenv_server_is_an_infra_failure():
    with pytest.raises(EnvInfraError, match="schema"):
        OpenEnvEnv(f"http://127.0.0.1:{free_port()}", timeout_s=2)
