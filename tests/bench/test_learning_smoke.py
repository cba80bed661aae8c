"""bench/learning.py at toy scale: it runs the real loop and prints the documented JSON shape."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_learning_bench_prints_its_json_shape(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "bench" / "learning.py"), "--estimators", "gigpo",
                           "--envs", "Maze-v0,KeyDoor-v0", "--updates", "1", "--seeds", "1", "--eval-tasks", "4",
                           "--plot", str(tmp_path / "curves.png"), "--set", "sft_steps=2", "--set", "sft_episodes=2",
                           "--set", "groups_per_batch=2", "--set", "group_size=4", "--set", "concurrency=8", "--json"],
                          capture_output=True, text=True, timeout=1200, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    data = json.loads(done.stdout)
    assert set(data["envs"]) == {"Maze-v0", "KeyDoor-v0"} and data["updates"] == 1
    for per in data["envs"].values():
        assert set(per) == {"gigpo"}
        for e in per.values():
            for key in ("updates_to_0.5", "updates_to_0.8", "final_success", "collapsed"):
                assert len(e[key]) == 1, key
            assert e["updates_to_0.5"][0] in (None, 1) and 0.0 <= e["final_success"][0] <= 1.0
            assert e["collapsed"] == [False] and e["stopped_by"] == ["updates"] and len(e["wall_s"]) == 1
    assert (tmp_path / "curves.png").stat().st_size > 1000
