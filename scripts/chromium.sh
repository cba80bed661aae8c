#!/usr/bin/env bash
# Install Debian's Chromium for the viewer's browser tests (pytest -m browser), if it is missing.
# Idempotent; run as root. Playwright drives it through executable_path=/usr/bin/chromium,
# because `playwright install` cannot download browsers on these machines.
set -euo pipefail

if [ -x /usr/bin/chromium ]; then
  echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
  exit 0
fi

# Another apt/dpkg run may hold the lock: wait for it (up to 10 minutes) instead of failing.
for _ in $(seq 1 600); do
  if ! fuser /var/lib/dpkg/lock-frontend /var/lib/apt/lists/lock >/dev/null 2>&1; then
    break
  fi
  sleep 1
done

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends -o DPkg::Lock::Timeout=600 chromium fonts-dejavu-core
/usr/bin/chromium --version
