"""Code-v0 served by a real `agentgym envs serve` process: the contract checks and a solved episode via RemoteEnv."""

from __future__ import annotations

import pytest

import agentgym
from agentgym.checker import check_env_contract
from tests.helpers.code_env import solve
from tests.runtime.servers import served

pytestmark = pytest.mark.docker


def test_code_v0_passes_envs_check_and_the_solver_scores_1_through_the_env_server(docker_engine):
    with served("Code-v0") as server:
        report = check_env_contract(server.url, lambda: agentgym.make(server.url))
        assert report.passed, [(r.name, r.detail) for r in report.failures()]
        assert {r.name for r in report.results if not r.skipped} >= {"snapshot", "malformed_action", "async"}
        env = agentgym.make(server.url)
        try:
            reward, info = solve(env, "bounded_knapsack-03")
            assert reward == 1.0 and info["hidden_passed"] == info["hidden_total"]
        finally:
            env.close()
