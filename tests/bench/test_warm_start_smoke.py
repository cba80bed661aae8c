"""bench/warm_start.py at toy scale: SFT in two stages, a sampled and a greedy pass after each, one JSON object."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_warm_start_probe_prints_each_stage(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "warm_start.py"), "configs/quickstart.yaml",
                           "--stages", "1,1", "--tasks", "3", "--set", "sft_episodes=2", "--set", "torch_threads=1",
                           "--set", f"output_dir={tmp_path}", "--json"],
                          capture_output=True, text=True, timeout=900, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    assert data["env"] == "Maze-v0" and [r["sft_steps"] for r in data["stages"]] == [1, 2]
    for row in data["stages"]:
        assert row["demonstrations"] == 2
        for mode in ("sampled", "greedy"):
            assert set(row[mode]) == {"success", "turns_per_episode", "cut", "invalid"}
            assert 0.0 <= row[mode]["success"] <= 1.0 and 1 <= row[mode]["turns_per_episode"] <= 10
