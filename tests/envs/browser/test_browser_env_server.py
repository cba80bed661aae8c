"""Browser-v0 through the env server: `agentgym envs serve Browser-v0` in its own process, checked remotely."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

import agentgym
from agentgym.cli import app
from tests.runtime.servers import served


# Browser-v0 through an env server: its container (test_family_containers.py, whose server is this one, with the
# contract, solved tasks and killed Chromium); `envs check URL` through the CLI: test_env_server.py
@pytest.mark.extended
@pytest.mark.parametrize("env_kwargs", [{}, {"suite": "miniwob", "task": "click-checkboxes"}], ids=["sites", "miniwob"])
def test_envs_check_passes_through_the_env_server(env_kwargs):
    with served("Browser-v0", env_kwargs=env_kwargs) as server:
        result = CliRunner().invoke(app, ["envs", "check", server.url, "--json"])
        assert result.exit_code == 0, result.output
        report = json.loads(result.output)
        assert report["passed"] is True
        env = agentgym.make(server.url)
        obs, info = env.reset(seed=0)
        assert obs.startswith("Task: ") and "URL: http://" in obs
        obs, _, _, _, info = env.step("click(99999)")
        assert info["error_kind"] == "action_failed" and "no element [99999]" in obs
        env.close()
