#!/usr/bin/env bash
# Run a command inside a fresh network namespace that has only loopback, so that Ray binds to 127.0.0.1
# and never advertises the machine's own address. Every Ray test and benchmark runs this way.
#
#   scripts/ray-netns.sh .venv/bin/python -m agentgym.trainer.ray_runtime --set runtime=ray --set mode=async --json
#   scripts/ray-netns.sh .venv/bin/pytest tests/trainer/test_ray_runtime.py
#
# Needs util-linux (unshare) and iproute2 (ip); as root the namespace is made directly, otherwise in a
# user namespace (where the kernel allows unprivileged ones). Ray's auth token and usage stats are off.
set -euo pipefail

if [[ $# -eq 0 ]]; then
  echo "usage: scripts/ray-netns.sh COMMAND [ARG...]" >&2
  exit 2
fi
for tool in unshare ip; do
  command -v "$tool" >/dev/null || { echo "scripts/ray-netns.sh: '$tool' not found; run scripts/apt.sh (util-linux, iproute2)" >&2; exit 2; }
done

export RAY_AUTH_MODE=disabled RAY_USAGE_STATS_ENABLED=0
if [[ $(id -u) == 0 ]]; then
  ns=(unshare --net)
else
  ns=(unshare --user --map-root-user --net)
fi
exec "${ns[@]}" -- bash -c 'ip link set lo up && exec "$@"' ray-netns "$@"
