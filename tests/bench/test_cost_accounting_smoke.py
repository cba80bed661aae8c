"""bench/cost_accounting.py at toy scale: it runs the real collector, server and workers and prints its figures."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_cost_accounting_bench_prints_its_figures():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "cost_accounting.py"), "--episodes", "2", "--json"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout)
    measured = ("split_residual", "cpu_attributed", "maze_peak_mb", "burn_peak_mb")
    assert set(figures) == {"episodes", *measured} and figures["episodes"] == 2
    assert all(math.isfinite(figures[k]) for k in measured)


def test_an_odd_number_of_episodes_is_refused():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "cost_accounting.py"), "--episodes", "3"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 2 and "even" in done.stderr
