#!/usr/bin/env bash
# A checkout of REV in DIR with an environment of its own, to run a long benchmark from while you keep
# editing this one: `agentgym.trainer`, `agentgym.envs` and `agentgym.sandboxes` are this checkout's
# top-level folders, mapped by the editable install, so a benchmark started from a plain `git worktree`
# still imports them from here (and a spawned run picks up whatever you saved meanwhile).
#
#   scripts/bench-worktree.sh DIR [REV]        # REV defaults to HEAD
#   cd DIR && .venv/bin/python bench/learning.py ...
#
# DIR/.venv reuses this checkout's .venv packages (a .pth line, no copies) and installs DIR in editable
# mode on top, without dependencies; remove with `git worktree remove --force DIR`.
set -euo pipefail
dir=${1:?usage: scripts/bench-worktree.sh DIR [REV]}
rev=${2:-HEAD}
root=$(cd "$(dirname "$0")/.." && pwd)
[ -x "$root/.venv/bin/python" ] || { echo "no $root/.venv: run make setup first" >&2; exit 2; }
[ -e "$dir" ] && { echo "$dir exists: give a new directory" >&2; exit 2; }
git -C "$root" worktree add --detach "$dir" "$rev"
base=$("$root/.venv/bin/python" -c 'import sys; print(sys.base_prefix)')
"$base/bin/python3" -m venv --without-pip "$dir/.venv"  # pip and setuptools come from the shared packages
site=$("$dir/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$root/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/zz-shared-packages.pth"
"$dir/.venv/bin/python" -m pip install --quiet --no-deps --no-build-isolation -e "$dir"
(cd "$dir" && .venv/bin/python -c 'import agentgym.config as c, agentgym.trainer.loops as m, os, sys
sys.exit(0 if all(f.startswith(os.getcwd()) for f in (c.__file__, m.__file__)) else 1)') \
  || { echo "$dir/.venv does not import agentgym from $dir" >&2; exit 1; }
echo "ready: cd $dir && .venv/bin/python bench/learning.py ..."
