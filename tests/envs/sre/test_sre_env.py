"""SRE-v0's env behaviour on real containers: policy refusals, mutations in info, scoring, fingerprints,
infrastructure failures."""

from __future__ import annotations

import pytest
from agentgym.envs.sre.tasks import shipped_tasks

from agentgym.errors import EnvInfraError
from tests.helpers.sre_play import solve, tool

pytestmark = pytest.mark.docker

CRASH = "easy/crashed_process-app-KILL/s0"


def test_refused_calls_are_recorded_penalised_and_not_executed(sre_env) -> None:
    sre_env.reset(options={"task_id": CRASH})
    obs, reward, terminated, _, info = sre_env.step(tool("run", command="rm -rf /srv"))
    assert "REFUSED" in obs and "destructive" in obs and not terminated
    assert info["mutations"] == [{"name": "run", "arguments": {"command": "rm -rf /srv"}, "status": "refused",
                                  "reason": info["mutations"][0]["reason"]}]
    obs, *_ = sre_env.step(tool("ls", path="/srv/etc"))
    assert "app.conf" in obs  # never executed: the system is intact
    _, _, _, _, info = sre_env.step(tool("restart", service="app"))
    assert info["mutations"][0]["status"] == "executed" and info["health"]["app"] is True
    _, reward, terminated, _, info = sre_env.step(tool("submit"))
    assert terminated and info["success"] is True
    assert info["reward_terms"] == {"health": 1.0, "diagnosis": 0.0, "penalty": pytest.approx(-0.1)}
    assert reward == pytest.approx(0.8 - 0.1)


def test_forbidden_tool_and_spent_budget_are_refused(sre_env) -> None:
    task = next(t for t in shipped_tasks() if "run" in t.policy.forbidden)
    obs, _ = sre_env.reset(options={"task_id": task.id})
    assert "`run` forbidden" in obs
    obs, *_, info = sre_env.step(tool("run", command="true"))
    assert "forbids `run`" in obs and info["refused_total"] == 1
    budget = dict(task.policy.budgets)["restart"]
    for _ in range(budget):
        sre_env.step(tool("restart", service="worker"))
    obs, *_, info = sre_env.step(tool("restart", service="worker"))
    assert "budget" in obs and info["mutations"][0]["status"] == "refused" and info["refused_total"] == 2


def test_wrong_diagnosis_and_unrepaired_system_score_low(sre_env) -> None:
    sre_env.reset(options={"task_id": CRASH})
    sre_env.step(tool("diagnose", kind="disk_full", component="disk"))
    _, reward, terminated, _, info = sre_env.step(tool("submit"))
    assert terminated and reward == 0.0 and info["success"] is False
    assert info["faults"] == ["crashed_process-app-KILL"] and info["diagnoses"] == [["disk_full", "disk"]]


def test_fingerprint_is_system_state_not_text(sre_env) -> None:
    inner = sre_env.unwrapped
    prints = []
    for _ in range(2):
        sre_env.reset(options={"task_id": CRASH})
        start = inner.state_fingerprint()
        sre_env.step(tool("logs", service="supervisor"))  # an observer: timestamps differ, the state does not
        assert inner.state_fingerprint() == start
        sre_env.step(tool("restart", service="app"))
        prints.append((start, inner.state_fingerprint()))
    assert prints[0] == prints[1] and prints[0][0] != prints[0][1]


def test_malformed_actions_are_error_observations(sre_env) -> None:
    sre_env.reset(options={"task_id": CRASH})
    for action in ["", "restart the app please", tool("nope"), tool("restart", service="postgres"),
                   tool("cat", path="relative/path"), tool("edit_config", path="/etc/passwd", find="a", replace="b")]:
        obs, reward, terminated, truncated, info = sre_env.step(action)
        assert not terminated and not truncated and reward == 0.0
        assert info.get("error_kind") or any(c.get("status") == "error" for c in info["tool_calls"]), action


def test_dead_container_is_an_infra_failure_and_the_next_episode_works(sre_env) -> None:
    from agentgym.sandboxes import docker

    sre_env.reset(options={"task_id": CRASH})
    docker.client().api.remove_container(sre_env.unwrapped._system.sandbox.id, force=True)
    with pytest.raises(EnvInfraError):
        sre_env.step(tool("status"))
    sre_env.reset(options={"task_id": CRASH})
    reward, info = solve(sre_env)
    assert info["success"] is True and reward == pytest.approx(1.0)


def test_the_reset_health_is_the_one_two_readings_in_a_row_agree_on(monkeypatch) -> None:
    """A health check that timed out once on a loaded machine must not make the same seed's reset report another
    health (Gymnasium's determinism check compares it): the reset reads until two readings agree."""
    from agentgym.envs.sre import env as sre_env_module
    from agentgym.envs.sre.system import Health

    def health(app_ok: bool) -> Health:
        return Health(False, {"app": {"ok": app_ok}, "redis": {"ok": False}})

    readings = iter([health(False), health(True), health(True), health(False)])  # a timeout, then the steady state
    env = sre_env_module.SreEnv()
    monkeypatch.setattr(sre_env_module, "RESET_CHECK_WAIT_S", 0.0)
    monkeypatch.setattr(env, "_health", lambda: next(readings))
    assert env._stable_health().vector == {"app": True, "redis": False}
    flapping = iter([health(i % 2 == 0) for i in range(sre_env_module.RESET_CHECK_READINGS)])
    monkeypatch.setattr(env, "_health", lambda: next(flapping))
    assert env._stable_health().vector == {"app": False, "redis": False}  # never settled: the last reading
    env.close()
