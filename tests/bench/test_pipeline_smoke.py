"""Toy-scale run of bench/pipeline.py: both modes go through the real collector, data manager and trainer loop.

Asserts behaviour only (the JSON contract, the staleness bound, that both modes trained); speed is the
benchmark's business, never a test's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench" / "pipeline.py"
KEYS = ("sync_samples_per_s", "async_samples_per_s", "async_speedup", "async_trainer_idle_frac", "max_staleness")


def run_bench(*args: str) -> dict:
    out = subprocess.run([sys.executable, str(BENCH), "--json", *args], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_pipeline_bench_runs_both_modes_at_toy_scale():
    result = run_bench("--median-s", "0.004", "--updates", "4", "--calibration-batches", "3", "--batch", "16",
                       "--group-size", "4", "--in-flight", "16", "--staleness-bound", "1")
    for key in KEYS:
        assert key in result, f"missing {key} in {result}"
    rates = [result["sync_samples_per_s"], result["async_samples_per_s"]]
    assert all(rate > 0 for rate in rates)
    assert 0 <= result["max_staleness"] <= 1  # the data manager never hands out data past the bound
    assert 0.0 <= result["async_trainer_idle_frac"] <= 1.0
    assert result["sync_updates"] == result["async_updates"] == 4


def test_pipeline_bench_rejects_a_batch_that_is_not_whole_groups():
    out = subprocess.run([sys.executable, str(BENCH), "--batch", "10", "--group-size", "4"], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2
    assert "multiple of --group-size" in out.stderr
