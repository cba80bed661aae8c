"""The short soak (bench/soak.py --short): a real async training run with env workers SIGKILLed and hung
mid-episode, sandbox disks filled, and the trainer SIGKILLed twice and resumed, then the accounting; once with the in-process policy
and once with `agentgym serve` behind a proxy that answers 500s, drops connections and stalls. Counts only,
never times.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


def short_soak(workdir: Path, *args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, str(BENCH), "--short", "--json", "--seed", "3", "--workdir", str(workdir),
                          *args], capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-8000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def assert_nothing_lost(result: dict[str, Any], trainer_kills: int = 2) -> None:
    """The accounting every soak must pass: faults matched to infra failures, nothing lost, twice or leaked."""
    faults = result["faults_injected"]
    assert faults.get("trainer_kill") == trainer_kills and result["updates"]["resumes"] == trainer_kills
    assert faults.get("worker_kill", 0) + faults.get("step_hang", 0) > 0, result
    # every env fault whose episode reached the store made it the matching infra failure, and nothing else did
    assert result["fault_mismatches"] == 0, (result["fault_mismatch_examples"], result.get("policy_faults"))
    hit = result["faults_hit_stored_episodes"]
    assert result["infra_failures"].get("env_worker_died", 0) == hit.get("worker_kill", 0)
    assert result["infra_failures"].get("env_timeout", 0) == hit.get("step_hang", 0)
    # in flight at a trainer kill: stored at its start, ended on resume as an infra failure the kill explains
    # (on Ray also a dropped env connection, as the cluster died with its driver: env_lost_at_trainer_kill)
    assert result["infra_failures"].get("trainer_stopped", 0) + result.get("env_lost_at_trainer_kill", 0) \
        == hit.get("trainer_kill", 0)
    from_faults = {k: v for k, v in result["infra_failures"].items() if k != "run_ended"}  # the run's own end
    assert sum(from_faults.values()) == sum(hit.values()) > 0
    assert result["lost"] == 0 and result["duplicated"] == 0 and result["unnamed_episodes"] == 0, result
    assert result["finished_unstored_at_stop"] == 0 and result["episodes"]["not_terminal"] == 0, result
    assert result["infra_trained"]["by_ledger"] == 0 and result["infra_trained"]["by_turn_credit"] == 0
    assert result["infra_trained"]["trained_twice"] == 0
    updates = result["updates"]
    assert updates["final"] > 0 and updates["applied_twice"] == 0 and updates["skipped"] == 0
    assert result["leaked"]["processes"] == 0 and result["leaked"]["temp_entries"] == 0, result["leaked"]
    assert "driver" in result["rss"] and all("slope_mb_per_min" in r for r in result["rss"].values())


#: a disk_fill chance per step that fills several sandboxes in a short soak (the default, 0.4%, may fill none)
DISK_RATE = "0.015"


def assert_disk_fills_matched(result: dict[str, Any]) -> None:
    """Every filled sandbox disk ended its episode as sandbox_disk_full (or a trainer kill or the run's end came
    first), and no later episode on its worker or in its workspace failed of a full disk."""
    disk = result["disk_faults"]
    assert disk["fills"] == result["faults_injected"].get("disk_fill", 0) > 0, disk
    assert disk["ended_episode"] == result["faults_hit_stored_episodes"].get("disk_fill", 0) \
        == result["infra_failures"].get("sandbox_disk_full", 0) > 0, disk
    assert disk["ended_episode"] + disk["preempted"] + disk["not_stored"] == disk["fills"], disk
    assert disk["poisoned"] == 0, disk


@pytest.mark.slow
@pytest.mark.serial
def test_short_soak_loses_nothing(tmp_path):
    result = short_soak(tmp_path, "--disk-rate", DISK_RATE)
    assert_nothing_lost(result)
    assert_disk_fills_matched(result)


@pytest.mark.extended
@pytest.mark.slow
@pytest.mark.serial
def test_short_soak_with_a_faulty_policy_server_loses_nothing(tmp_path):
    # one trainer kill, aimed between a weight push and its checkpoint (the in-process soak above covers two)
    result = short_soak(tmp_path, "--policy", "served", "--trainer-kills", "1")
    assert_nothing_lost(result, trainer_kills=1)
    policy = result["policy_faults"]
    assert sum(policy["requests_faulted"].values()) > 0 and policy["mismatches"] == 0, policy
    # an isolated fault is absorbed by the client's retry; an outage ends its episode as a policy infra failure
    assert sum(policy["absorbed_by_retry"].values()) == policy["isolated"] > 0, policy
    assert policy["isolated_not_stored"] == 0 and policy["outages_not_stored"] == 0, policy
    assert result["infra_failures"].get("policy_failed", 0) == policy["outages_ended_episode"] \
        == result["faults_hit_stored_episodes"].get("policy_outage", 0)
    assert sum(policy["outages"].values()) == policy["outages_ended_episode"] + policy["outages_preempted"]
    # the server ends with the last checkpoint's weights and version, across the faults and both resumes
    sync = result["weight_sync"]
    assert sync["served_version"] == sync["checkpoint_version"] == result["updates"]["final"] and sync["digest_equal"]
    # the first kill fell between a weight push and its checkpoint: that resume sent the server a lower version
    assert sync["rewound_at_resume"] == 1, result["updates"]["per_resume"]
    assert "policy_server" in result["rss"]


@pytest.mark.slow
@pytest.mark.serial
@pytest.mark.docker
def test_short_soak_with_env_containers_killed_loses_nothing(tmp_path):
    """The envs in env_cluster containers (bench/soak_containers.py), one killed every ~10 s; one trainer kill (the
    in-process soak above covers two) to keep it near two minutes."""
    result = short_soak(tmp_path, "--envs", "containers", "--trainer-kills", "1", "--container-kill-every-s", "10",
                        "--disk-rate", DISK_RATE)
    assert_nothing_lost(result, trainer_kills=1)
    assert_disk_fills_matched(result)  # the sandboxes are inline slots of the env containers here
    containers = result["container_faults"]
    assert containers["kills"] > 0 and containers["over_sessions"] == 0, containers
    # every kill's episodes ended as infra failures matched to it (mid-episode by token, or refused by directory)
    hit = result["faults_hit_stored_episodes"].get("container_kill", 0)
    assert containers["episodes_ended"] + containers["refused"] == hit == result["infra_failures"]["env_connection_lost"]
    assert hit > 0, containers
    assert result["leaked"]["containers"] == 0, result["leaked"]
