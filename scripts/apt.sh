#!/usr/bin/env bash
# Install the Debian packages the test suites need, in one apt transaction; safe to run again.
#
#   bash scripts/apt.sh        (as root; `make test` runs it)
#
# docker.io + debootstrap: the sandbox engine and its base image; bubblewrap: the local sandbox
# backend; chromium: the viewer's browser tests; iproute2 + util-linux: loopback-only network
# namespaces for Ray (ip, unshare); postgresql: the server binaries from which the tests start a
# throwaway PostgreSQL when none is reachable (tests/helpers/postgres.py).
set -euo pipefail

need=()
command -v dockerd >/dev/null || need+=(docker.io)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v bwrap >/dev/null || need+=(bubblewrap)
[[ -x /usr/bin/chromium ]] || need+=(chromium)
command -v ip >/dev/null || need+=(iproute2)
command -v unshare >/dev/null || need+=(util-linux)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
command -v gcc >/dev/null || need+=(gcc make libc6-dev)  # jericho (TextWorld's engine, a test env) builds from source
((${#need[@]})) || { echo "apt packages: all present"; exit 0; }
[[ $(id -u) == 0 ]] || { echo "scripts/apt.sh: need root to install ${need[*]}" >&2; exit 1; }
echo "installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${need[@]}"
