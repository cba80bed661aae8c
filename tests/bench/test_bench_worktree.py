"""scripts/bench-worktree.sh: a benchmark run from the worktree imports the worktree's code, all of it."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_worktree_imports_its_own_trainer_and_envs_not_this_checkouts(tmp_path):
    wt = tmp_path / "wt"
    made = subprocess.run(["bash", str(ROOT / "scripts" / "bench-worktree.sh"), str(wt), "HEAD"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    try:
        assert made.returncode == 0, made.stdout[-2000:] + made.stderr[-2000:]
        where = subprocess.run([str(wt / ".venv" / "bin" / "python"), "-c",
                                "import agentgym.config, agentgym.trainer.loops, agentgym.envs, torch\n"
                                "print(agentgym.config.__file__, agentgym.trainer.loops.__file__, "
                                "agentgym.envs.__file__)"], capture_output=True, text=True, timeout=120, cwd=wt)
        assert where.returncode == 0, where.stderr[-2000:]
        assert all(path.startswith(str(wt)) for path in where.stdout.split()), where.stdout
        again = subprocess.run(["bash", str(ROOT / "scripts" / "bench-worktree.sh"), str(wt)],
                               capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert again.returncode == 2 and "exists" in again.stderr
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(wt)], cwd=ROOT, capture_output=True)
        subprocess.run(["git", "worktree", "prune"], cwd=ROOT, capture_output=True)
