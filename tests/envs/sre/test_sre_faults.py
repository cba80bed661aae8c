"""Every SRE-v0 fault kind really breaks the system's health checks, and its scripted repair restores them.

One test per fault kind on the real containers (one task each, the first
variant), plus a fault-with-red-herring task and a two-fault task. The
module's env reuses warm containers between tests.
"""

from __future__ import annotations

import pytest
from agentgym.envs.sre.faults import KINDS
from agentgym.envs.sre.tasks import shipped_tasks

from tests.helpers.sre_play import solve

pytestmark = pytest.mark.docker

# The check(s) each kind's first task is expected to fail at the start.
BROKEN = {
    "crashed_process": {"app"}, "hung_process": {"app"}, "wrong_config": {"frontend"},
    "bad_permission": {"app"}, "disk_full": {"disk"}, "connection_exhaustion": {"app"},
    "port_conflict": {"app"}, "runaway_log": {"disk"}, "bad_credentials": {"app"}, "bad_deploy": {"app"},
    "missing_index": {"app"},
}


def first_task(kind: str) -> str:
    return next(t.id for t in shipped_tasks() if t.difficulty == "easy" and t.faults[0].kind == kind)


def test_every_kind_has_an_expectation() -> None:
    assert set(BROKEN) == set(KINDS) and len(KINDS) >= 10


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_fault_breaks_health_and_solver_restores_it(sre_env, kind: str) -> None:
    task_id = first_task(kind)
    _, info = sre_env.reset(seed=0, options={"task_id": task_id})
    failing = {name for name, ok in info["health"].items() if not ok}
    assert BROKEN[kind] <= failing, f"{task_id}: expected {BROKEN[kind]} to fail, failing: {failing}"
    reward, final = solve(sre_env)
    assert final["success"] is True, final["health_checks"]
    assert reward == pytest.approx(1.0)
    assert final["reward_terms"] == {"health": 1.0, "diagnosis": 1.0, "penalty": -0.0}
    assert any(m["status"] == "executed" for m in final["mutations"]) or final["tool_calls"][-1]["name"] == "submit"


@pytest.mark.parametrize("task_id", [
    next(t.id for t in shipped_tasks() if t.difficulty == "medium" and t.herring == "idle_helper"),
    next(t.id for t in shipped_tasks() if t.difficulty == "hard" and "run" in t.policy.forbidden),
    "hard/disk_full-disk-export+missing_index-db-idx_orders_customer",  # the disk fills after the other fault
])
def test_herring_and_two_fault_tasks_are_solved(sre_env, task_id: str) -> None:
    _, info = sre_env.reset(seed=1, options={"task_id": task_id})
    assert not all(info["health"].values())
    reward, final = solve(sre_env)
    assert final["success"] is True and reward == pytest.approx(1.0), final["health_checks"]
    assert final["reward_terms"]["diagnosis"] == 1.0
