"""SRE-v0 served by a real `agentgym envs serve` process: the contract checks and a repaired system via RemoteEnv."""

from __future__ import annotations

import pytest

import agentgym
from agentgym.checker import check_env_contract
from tests.helpers.sre_play import solve
from tests.runtime.servers import served

pytestmark = pytest.mark.docker


@pytest.mark.extended  # the same check and solve through SRE-v0's container (test_sre_container.py), whose env
# server is this one; SRE-v0 on the host's Docker engine: test_sre_env.py and test_sre_faults.py
def test_sre_v0_passes_envs_check_and_the_solver_repairs_through_the_env_server(docker_engine):
    with served("SRE-v0") as server:
        report = check_env_contract(server.url, lambda: agentgym.make(server.url))
        assert report.passed, [(r.name, r.detail) for r in report.failures()]
        assert {r.name for r in report.results if not r.skipped} >= {"malformed_action", "async", "close"}
        env = agentgym.make(server.url)
        try:
            env.reset(seed=0, options={"task_id": "easy/bad_credentials-app-typo/s0"})
            reward, info = solve(env)
            assert reward == pytest.approx(1.0) and info["success"] is True
            assert [m["name"] for m in info["mutations"]] == [] and info["reward_terms"]["health"] == 1.0
        finally:
            env.close()
