#!/bin/bash
# Image build step (no network): the service user, the seed of /srv, and ownership.
set -euo pipefail
groupadd --gid 1001 svc
useradd --uid 1001 --gid 1001 --no-create-home --home-dir /srv/run --shell /usr/sbin/nologin svc
SEED=/opt/sre/srv
mkdir -p "$SEED/data/redis" "$SEED/log/nginx" "$SEED/run/nginx"
python3 /opt/sre/build/make_db.py "$SEED/data/app.db"
ln -sfn releases/1.4.2 "$SEED/app/current"
echo 1.4.2 > "$SEED/app/DEPLOYS"
chown -R root:root /opt/sre
chmod 755 /opt/sre/bin/*
chmod 644 "$SEED"/etc/*
chown -R svc:svc "$SEED/data" "$SEED/log/nginx" "$SEED/run"
# Helper programs faults and red herrings start under realistic names.
for name in report-exporter metrics-pusher cache-warmer; do cp /opt/sre/tools/pool-client "/opt/sre/tools/$name"; done
for name in backup-agent log-shipper; do cp /opt/sre/tools/idle-agent "/opt/sre/tools/$name"; done
chmod 755 /opt/sre/tools/*
