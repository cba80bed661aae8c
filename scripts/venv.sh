#!/usr/bin/env bash
# Create .venv and install agentgym into it with the given extras; safe to run again.
#
#   bash scripts/venv.sh train            # the quickstart
#   bash scripts/venv.sh train,dev,...    # the test suites
#
# torch is installed first, as $TORCH_SPEC (default: the CPU build torch==2.13.0, which pip takes
# from this machine's disk), so that no dependency pulls a multi-GB CUDA build. GPU users set
# TORCH_SPEC to their own build (or "skip" to keep the torch they have). The rest goes in through uv
# when it can (scripts/pip-fast.sh: the same versions as pip, minutes faster).
set -euo pipefail
EXTRAS="${1:-train}"
PY="${PYTHON:-python3}"
VENV="${VENV:-.venv}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"

[[ -x "$VENV/bin/python" ]] || "$PY" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check)
if [[ "$TORCH_SPEC" != skip ]] && ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
    echo "installing $TORCH_SPEC"
    "${PIP[@]}" "$TORCH_SPEC"
fi
stamp="$VENV/.agentgym-installed-$(echo "$EXTRAS" | tr ',' '-')"
if [[ ! -f "$stamp" || pyproject.toml -nt "$stamp" ]]; then
    echo "installing agentgym[$EXTRAS]"
    source "$(dirname "${BASH_SOURCE[0]}")/pip-fast.sh"
    fast_install "$VENV" -e ".[$EXTRAS]"
    touch "$stamp"
fi
