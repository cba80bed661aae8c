"""The OpenEnv adapter against a real OpenEnv server: the echo env that `openenv init` (openenv-core, PyPI)
generates, served by OpenEnv's own FastAPI app under uvicorn, started by the test.

The policy is scripted (labelled): it says a fixed sentence.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from agentgym.checker import check_env_contract
from agentgym.errors import EnvInfraError
from agentgym.runtime.openenv import OpenEnvEnv, render_observation
from agentgym.single_episode import run_episode
from tests.runtime.servers import free_port

pytest.importorskip("openenv.core")
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def echo_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("openenv")
    openenv = Path(sys.executable).with_name("openenv")
    subprocess.run([str(openenv), "init", "echo_env"], cwd=root, check=True, capture_output=True, timeout=120)
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "uvicorn", "server.app:app", "--port", str(port)],
                              cwd=root / "echo_env", env={**os.environ, "PYTHONPATH": str(root / "echo_env")},
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                break
        assert server.poll() is None, server.stderr.read()
        time.sleep(0.2)
    yield url, server
    server.terminate()
    server.wait(15)


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
