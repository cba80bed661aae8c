"""The soak's fault accounting on hand-made records (no run): which infra failure each fault explains."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from soak_accounting import fault_match  # noqa: E402

from agentgym.store import IN_FLIGHT_AT_END, IN_FLIGHT_AT_RESUME  # noqa: E402


def episode(token: str, error: str | None, failure: str | None = "infra") -> dict:
    return {"id": f"id-{token}", "token": token, "status": "error", "failure": failure, "error": error}


def test_faults_explain_infra_failures_and_stops_preempt_env_faults():
    died = "env worker 7 of SoakMaze-v0 died during env.step (killed by SIGKILL)"
    faults = [{"kind": "worker_kill", "token": "a", "time": 10.0},
              {"kind": "step_hang", "token": "b", "time": 11.0},  # the trainer was killed before it timed out
              {"kind": "step_hang", "token": "c", "time": 12.0},  # the run ended before it timed out
              {"kind": "trainer_kill", "time": 20.0}]
    stored = [episode("a", died), episode("b", IN_FLIGHT_AT_RESUME), episode("c", IN_FLIGHT_AT_END),
              episode("d", IN_FLIGHT_AT_RESUME),  # in flight at the kill, no env fault
              episode("e", IN_FLIGHT_AT_RESUME),  # started after the only kill: nothing explains it
              episode("f", "env worker 9 did not answer env.step within 3 s"),  # a timeout without a fault
              episode("g", None, failure="model")]
    by_token = {e["token"]: [e] for e in stored}
    starts = {"a": 1.0, "b": 2.0, "c": 3.0, "d": 4.0, "e": 25.0, "f": 5.0, "g": 6.0}
    result = fault_match(faults, by_token, [e for e in stored if e["failure"] == "infra"], starts)
    assert result["faults_hit_stored_episodes"] == {"worker_kill": 1, "trainer_kill": 2}
    assert result["fault_mismatches"] == 2
    assert sorted(m["episode"] for m in result["fault_mismatch_examples"]) == ["id-e", "id-f"]
