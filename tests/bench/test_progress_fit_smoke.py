"""bench/progress_fit.py at toy scale: a warm start, two batches, two heads fitted, one JSON object."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_progress_fit_probe_reports_each_head(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "progress_fit.py"), "configs/spa.yaml",
                           "--heads", "hidden:1e-3,logits:3e-5", "--steps", "2", "--every", "1",
                           "--set", "sft_steps=2", "--set", "sft_episodes=2", "--set", "groups_per_batch=2",
                           "--set", "group_size=3", "--set", "torch_threads=1", "--set", f"output_dir={tmp_path}",
                           "--json"], capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    assert data["env"] == "Maze-v0" and data["episodes"] == [6, 6]
    assert [(h["features"], h["lr"]) for h in data["heads"]] == [("hidden", 1e-3), ("logits", 3e-5)]
    for head in data["heads"]:
        assert [p["step"] for p in head["curve"]] == [1, 2]
        assert all(p["ev_fit"] <= 1.0 and p["ev_held_out"] <= 1.0 and p["loss"] >= 0.0 for p in head["curve"])


def test_progress_fit_rejects_a_malformed_head(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "progress_fit.py"), "configs/spa.yaml",
                           "--heads", "hidden", "--set", f"output_dir={tmp_path}"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 2 and "features:lr" in done.stderr
