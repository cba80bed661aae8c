"""bench/learning.py at toy scale: it runs the real loop and prints the documented JSON keys."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_learning_bench_prints_its_json_keys():
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "learning.py"), "--estimators", "grpo,gigpo",
                           "--updates", "1", "--seeds", "1", "--json"], capture_output=True, text=True, timeout=900,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    for name in ("grpo", "gigpo"):
        assert data[f"{name}_updates_to_threshold"] == 1.0  # reached at update 1, or never (counted as --updates)
        assert 0.0 <= data[f"{name}_final_success"] <= 1.0
