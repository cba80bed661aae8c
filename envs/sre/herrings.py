"""Red herrings: things in the system that look wrong but break nothing.

Each is a post-start shell snippet run as root inside the system container.
A task with a red herring still has exactly its faults to repair; touching
the herring neither helps nor (unless destructive) costs anything.
"""

from __future__ import annotations

HERRINGS: dict[str, str] = {
    # A scary but harmless warning in the app's log.
    "warning_in_log": "echo 'WARNING cache_ttl is deprecated and ignored; remove it from app.conf' >> /srv/log/app.log",
    # A large, old (but harmless) archive that leaves plenty of disk.
    "old_archive": "mkdir -p /srv/data/archive && head -c 6291456 /dev/zero > /srv/data/archive/orders-2023.csv.gz",
    # An idle helper process with a worrying name.
    "idle_helper": "setsid -f /opt/sre/tools/backup-agent </dev/null >/dev/null 2>&1",
    # A commented-out stale value in a config file.
    "stale_comment": "sed -i 's|^redis_port = 6379$|# the staging redis listened on 6390 (retired)\\nredis_port = 6379|' "
                     "/srv/etc/app.conf",
    # Old 5xx lines in nginx's access log, from before the incident.
    "old_errors": "for i in 1 2 3; do echo '127.0.0.1 - - [01/Jan/2024:03:0$i:00 +0000] \"GET /orders HTTP/1.1\" 502 "
                  "157 \"-\" \"curl/7.88\"' >> /srv/log/nginx/access.log; done",
    # An older release left on disk.
    "old_release": "cp -a /srv/app/releases/1.4.2 /srv/app/releases/1.3.9 && "
                   "sed -i 's|^VERSION = .*|VERSION = \"1.3.9\"|' /srv/app/releases/1.3.9/app.py",
}
