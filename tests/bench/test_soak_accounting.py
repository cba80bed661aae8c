"""The soak's fault accounting on hand-made records (no run): which infra failure each fault explains."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from soak_accounting import disk_fault_match, fault_match  # noqa: E402

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


def test_ray_actor_kills_explain_their_infra_kinds_and_preempt_env_faults():
    from agentgym.trainer.ray_runtime.data_actor import IN_FLIGHT_AT_WORKER_LOSS
    from soak_ray import Explainer

    lost = "env.step: the connection to the env server at http://127.0.0.1:5/SoakMaze-v0 was lost during step: EOF"
    faults = [{"kind": "actor_kill", "actor": "RolloutWorker", "pid": 41, "children": [], "time": 30.0},
              {"kind": "actor_kill", "actor": "EnvWorker", "pid": 50, "children": [51, 52], "time": 40.0},
              {"kind": "step_hang", "token": "h", "time": 39.0},  # its env worker was killed before it timed out
              {"kind": "trainer_kill", "time": 50.0}]  # the cluster died with its driver
    stored = [episode("r", IN_FLIGHT_AT_WORKER_LOSS), episode("s", IN_FLIGHT_AT_WORKER_LOSS),
              episode("h", lost), episode("x", lost), episode("y", lost)]
    owners = {"id-r": "rollout-0-41-abcdef", "id-s": "rollout-1-42-abcdef"}  # s: a process nobody killed
    starts = [{"token": "r", "pid": 60, "time": 1.0}, {"token": "s", "pid": 61, "time": 1.0},
              {"token": "h", "pid": 51, "time": 1.0},
              {"token": "x", "pid": 9, "time": 45.0},  # its connection dropped as the cluster died at the trainer kill
              {"token": "y", "pid": 9, "time": 55.0}]  # after every kill: nothing explains it
    by_token = {e["token"]: [e] for e in stored}
    explainer = Explainer(faults, starts, owners)
    result = fault_match(faults, by_token, stored, {s["token"]: s["time"] for s in starts}, explainer)
    # r (its rollout worker), h (its env worker); x (the trainer kill)
    assert result["faults_hit_stored_episodes"] == {"actor_kill": 2, "trainer_kill": 1}
    assert explainer.at_trainer_kill == {"id-x"}
    assert sorted(m["episode"] for m in result["fault_mismatch_examples"]) == ["id-s", "id-y"]


def test_a_reset_in_flight_at_an_env_worker_kill_or_begun_after_it_is_the_kills():
    """A reset that met the killed env worker's dead server waits for the restarted one, past the collector's limit
    under load: explained when begun after the kill, or before it with the reset still in flight at the kill."""
    from soak_ray import RESET_SLACK_S, RESTART_WAIT_S, Explainer

    timeout = "env.reset did not answer within 23 s (our timeout)"
    faults = [{"kind": "actor_kill", "actor": "EnvWorker", "pid": 50, "children": [], "time": 100.0}]
    created = {"id-before": 94.0, "id-after": 130.0, "id-long-before": 100.0 - 23.0 - RESET_SLACK_S - 1,
               "id-too-late": 100.0 + RESTART_WAIT_S + 1}
    stored = [{**episode(name, timeout), "id": f"id-{name}", "token": None}
              for name in ("before", "after", "long-before", "too-late")]
    explainer = Explainer(faults, [], {}, created, reset_limit_s=23.0)
    result = fault_match(faults, {}, stored, {}, explainer)
    assert result["faults_hit_stored_episodes"] == {"actor_kill": 2}
    assert explainer.reset_at_env_restart == {"id-before", "id-after"}
    assert sorted(m["episode"] for m in result["fault_mismatch_examples"]) == ["id-long-before", "id-too-late"]


def test_a_disk_fill_ends_its_episode_and_a_later_full_disk_on_its_worker_is_poisoning():
    full = ("env.step: sandbox disk full: sandbox local-7-ab (local) refused moves/03.txt in its workspace /work "
            "(ENOSPC: No space left on device)")
    faults = [{"kind": "disk_fill", "token": "a", "pid": 7, "host": None, "time": 10.0},
              {"kind": "disk_fill", "token": "i", "pid": 30, "host": "c1", "workspace": "/sandboxes/3", "time": 5.0},
              {"kind": "disk_fill", "token": "p", "pid": 8, "host": None, "time": 10.0},  # run ended first
              {"kind": "disk_fill", "token": "q", "pid": 9, "host": None, "time": 10.0}]  # never stored
    stored = [episode("a", full), episode("b", None, failure=None),  # a's worker's next episode ran normally
              episode("c", full),  # a later episode on a's worker failed of a full disk with no fill of its own
              episode("p", IN_FLIGHT_AT_END), episode("z", full),
              episode("i", full), episode("j", None, failure=None)]  # j: a later session took i's inline slot
    starts = [{"token": "a", "pid": 7, "time": 1.0}, {"token": "b", "pid": 7, "time": 11.0},
              {"token": "c", "pid": 7, "time": 12.0}, {"token": "p", "pid": 8, "time": 2.0},
              {"token": "q", "pid": 9, "time": 3.0}, {"token": "z", "pid": 6, "time": 4.0},
              {"token": "i", "pid": 30, "host": "c1", "workspace": "/sandboxes/3", "time": 4.0},
              {"token": "j", "pid": 31, "host": "c1", "workspace": "/sandboxes/3", "time": 6.0},
              {"token": "k", "pid": 32, "host": "c2", "workspace": "/sandboxes/3", "time": 6.0}]  # another container
    by_token = {e["token"]: [e] for e in stored}
    report = disk_fault_match(faults, by_token, starts)["disk_faults"]
    assert {k: v for k, v in report.items() if k != "poisoned_examples"} == {
        "fills": 4, "ended_episode": 2, "preempted": 1, "not_stored": 1, "later_on_worker": 2,
        "later_on_workspace": 1, "next_normal": 2, "poisoned": 1}
    assert report["poisoned_examples"][0]["episode"] == "id-c"
    result = fault_match(faults, by_token, [e for e in stored if e["failure"] == "infra"],
                         {s["token"]: s["time"] for s in starts})
    assert result["faults_hit_stored_episodes"] == {"disk_fill": 2}
    assert sorted(m["episode"] for m in result["fault_mismatch_examples"]) == ["id-c", "id-z"]  # no fill of their own
