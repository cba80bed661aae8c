"""The order-stats worker: every `interval_s` it rolls the orders table up into Redis and writes
its heartbeat file. At log_level = debug it also dumps its whole working set to the log."""

import os
import sqlite3
import sys
import time

sys.path.insert(0, "/opt/sre/lib")
from conf import ini, say  # noqa: E402
from resp import Redis  # noqa: E402

DEBUG_DUMP_BYTES = 8 << 20


def cycle(cfg):
    conn = sqlite3.connect("file:{}?mode=ro".format(cfg["db_path"]), uri=True, timeout=2)
    try:
        count, newest = conn.execute("SELECT count(*), max(id) FROM orders").fetchone()
    finally:
        conn.close()
    client = Redis("127.0.0.1", cfg["redis_port"], cfg.get("redis_password", ""), timeout=1.0)
    try:
        client.call("SET", "stats:orders", f"{count} {newest or 0}")
    finally:
        client.close()
    return count


def beat(path, status):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"{status} {int(time.time())}\n")
    os.replace(tmp, path)


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "/srv/etc/worker.conf"
    try:
        cfg = ini(path, "worker")
        interval = float(cfg["interval_s"])
        heartbeat = cfg["heartbeat"]
        cfg["db_path"], cfg["redis_port"]
    except (OSError, KeyError, ValueError) as exc:
        say(f"FATAL cannot load config {path}: {type(exc).__name__}: {exc}")
        sys.exit(1)
    if not os.path.exists(cfg["db_path"]):
        say("FATAL database {} does not exist".format(cfg["db_path"]))
        sys.exit(1)
    level = cfg.get("log_level", "info")
    say(f"worker started (interval {interval:g}s, log_level {level})")
    debug = cfg.get("log_level", "info") == "debug"
    while True:
        status = "ok"
        try:
            count = cycle(cfg)
            if debug:
                line = "DEBUG rollup working set: " + f"orders={count} " * 64 + "\n"
                sys.stdout.write(line * (DEBUG_DUMP_BYTES // len(line)))
                sys.stdout.flush()
        except Exception as exc:
            status = "error {}: {}".format(type(exc).__name__, str(exc).replace("\n", " ")[:200])
            say(f"ERROR rollup failed: {status[6:]}")
        try:
            beat(heartbeat, status)
        except OSError as exc:
            say(f"ERROR cannot write heartbeat {heartbeat}: {exc}")
        time.sleep(interval)


if __name__ == "__main__":
    main()
