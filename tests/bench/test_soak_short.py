"""The short soak (bench/soak.py --short): a real async training run with env workers SIGKILLed and hung
mid-episode and the trainer SIGKILLed twice and resumed, then the accounting. Counts only, never times.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "soak.py"


@pytest.mark.slow
def test_short_soak_loses_nothing(tmp_path):
    out = subprocess.run([sys.executable, str(BENCH), "--short", "--json", "--seed", "3", "--workdir", str(tmp_path)],
                         capture_output=True, text=True, timeout=1200)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    faults = result["faults_injected"]
    assert faults.get("trainer_kill") == 2 and result["updates"]["resumes"] == 2
    assert faults.get("worker_kill", 0) + faults.get("step_hang", 0) > 0, result
    # every env fault whose episode reached the store made it the matching infra failure, and nothing else did
    assert result["fault_mismatches"] == 0, result["fault_mismatch_examples"]
    hit = result["faults_hit_stored_episodes"]
    assert result["infra_failures"].get("env_worker_died", 0) == hit.get("worker_kill", 0)
    assert result["infra_failures"].get("env_timeout", 0) == hit.get("step_hang", 0)
    # in flight at a trainer kill: stored at its start, ended on resume as an infra failure the kill explains
    assert result["infra_failures"].get("trainer_stopped", 0) == hit.get("trainer_kill", 0)
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
