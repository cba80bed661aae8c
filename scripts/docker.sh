#!/usr/bin/env bash
# Make the Docker engine and the agentgym base image ready; safe to run again.
#
#   bash scripts/docker.sh      (as root; `make test` runs it before pytest)
#
# 1. installs docker.io, debootstrap and bubblewrap from Debian if missing;
# 2. starts dockerd in the background if `docker info` fails (no bridge and no
#    iptables: containers get no network), logging to $AGENTGYM_DOCKERD_LOG,
#    and fails loudly with the log tail if it does not answer within 60 s;
# 3. builds agentgym/base:bookworm with docker/base.sh if it is missing.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
LOG="${AGENTGYM_DOCKERD_LOG:-/var/log/agentgym-dockerd.log}"
WAIT_S="${AGENTGYM_DOCKERD_WAIT_S:-60}"

die() { echo "scripts/docker.sh: $*" >&2; exit 1; }

missing=()
command -v dockerd >/dev/null || missing+=(docker.io)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v bwrap >/dev/null || missing+=(bubblewrap)
if ((${#missing[@]})); then
    [[ $(id -u) == 0 ]] || die "need root to install ${missing[*]} (run: sudo bash scripts/docker.sh)"
    echo "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

if ! docker info >/dev/null 2>&1; then
    [[ $(id -u) == 0 ]] || die "the Docker engine is not running and starting it needs root"
    echo "starting dockerd (log: $LOG)"
    mkdir -p "$(dirname "$LOG")"
    nohup dockerd --bridge=none --iptables=false >>"$LOG" 2>&1 &
    for ((i = 0; i < WAIT_S; i++)); do
        docker info >/dev/null 2>&1 && break
        if ! kill -0 $! 2>/dev/null; then
            tail -n 30 "$LOG" >&2
            die "dockerd exited during startup (log above, full log: $LOG)"
        fi
        sleep 1
    done
    if ! docker info >/dev/null 2>&1; then
        tail -n 30 "$LOG" >&2
        die "dockerd did not answer within ${WAIT_S}s (log above, full log: $LOG)"
    fi
fi
echo "docker engine: $(docker version --format '{{.Server.Version}}')"

bash "$HERE/docker/base.sh"
