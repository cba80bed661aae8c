"""shop-api 1.4.2: the storefront's HTTP API (behind nginx), backed by SQLite and Redis.

GET /health   every dependency: config, database reads (each within the query budget), a database
              write, Redis (AUTH, PING, INCR); 200 when all pass, else 503 with the failing ones
GET /orders?customer_id=N   a customer's order count and total
GET /         a greeting
"""

import json
import sqlite3
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

sys.path.insert(0, "/opt/sre/lib")
from conf import ini, say  # noqa: E402
from resp import Redis  # noqa: E402

VERSION = "1.4.2"
DEBUG_DUMP_BYTES = 2 << 20
TOP_QUERIES = {
    "orders_by_customer": ("SELECT count(*), coalesce(sum(total_cents), 0) FROM orders WHERE customer_id = ?",
                           4242),
    "items_by_order": ("SELECT count(*) FROM order_items WHERE order_id = ?", 777),
    "customer_by_email": ("SELECT id FROM customers WHERE email = ?", "customer4200@example.com"),
}


class QueryBudgetExceeded(Exception):
    pass


def connect(cfg, write=False):
    mode = "rw" if write else "ro"
    conn = sqlite3.connect("file:{}?mode={}".format(cfg["db_path"], mode), uri=True, timeout=2)
    budget = int(cfg.get("query_budget", "10"))
    calls = [0]

    def guard():
        calls[0] += 1
        return 1 if calls[0] > budget else 0

    conn.set_progress_handler(guard, 1000)
    return conn


def run_query(cfg, sql, arg):
    conn = connect(cfg)
    try:
        return conn.execute(sql, (arg,)).fetchall()
    except sqlite3.OperationalError as exc:
        if "interrupted" in str(exc):
            raise QueryBudgetExceeded("query exceeded its budget of {} x 1000 steps (slow query): {}".format(cfg.get("query_budget", "10"), sql)) from None
        raise
    finally:
        conn.close()


def check_db_write(cfg):
    conn = connect(cfg, write=True)
    try:
        conn.execute("INSERT INTO health_probe (payload) VALUES (randomblob(16384))")
        conn.execute("DELETE FROM health_probe")
        conn.commit()
    finally:
        conn.close()


def check_redis(cfg):
    client = Redis(cfg["redis_host"], cfg["redis_port"], cfg.get("redis_password", ""), timeout=1.0)
    try:
        client.call("PING")
        return client.call("INCR", "health:hits")
    finally:
        client.close()


def health(cfg):
    checks = {}
    for name, (sql, arg) in TOP_QUERIES.items():
        checks["db_" + name] = lambda sql=sql, arg=arg: run_query(cfg, sql, arg)
    checks["db_write"] = lambda: check_db_write(cfg)
    checks["redis"] = lambda: check_redis(cfg)
    results = {}
    for name, check in checks.items():
        try:
            check()
            results[name] = "ok"
        except Exception as exc:
            results[name] = f"fail: {type(exc).__name__}: {exc}"
    return results


class Handler(BaseHTTPRequestHandler):
    cfg = {}
    server_version = "shop-api/" + VERSION

    def do_GET(self):
        url = urlparse(self.path)
        try:
            if url.path == "/health":
                results = health(self.cfg)
                ok = all(v == "ok" for v in results.values())
                self.reply(200 if ok else 503, {"status": "ok" if ok else "fail", "version": VERSION,
                                                "checks": results})
            elif url.path == "/orders":
                customer = int(parse_qs(url.query).get("customer_id", ["0"])[0])
                rows = run_query(self.cfg, TOP_QUERIES["orders_by_customer"][0], customer)
                self.reply(200, {"customer_id": customer, "orders": rows[0][0], "total_cents": rows[0][1]})
            elif url.path == "/":
                self.reply(200, {"service": "shop-api", "version": VERSION})
            else:
                self.reply(404, {"error": "not found"})
        except Exception as exc:
            say(f"ERROR {self.command} {self.path}: {type(exc).__name__}: {exc}")
            self.reply(500, {"error": f"{type(exc).__name__}: {exc}"})

    def reply(self, code, body):
        data = (json.dumps(body) + "\n").encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, fmt, *args):
        debug = self.cfg.get("log_level", "info") == "debug"
        if debug or not str(args[1] if len(args) > 1 else "").startswith("2"):
            say("{} {}".format(time.strftime("%H:%M:%S"), fmt % args))
        if debug:  # dumps the whole request context: megabytes per request
            line = f"DEBUG request context: {self.path} headers={dict(self.headers)!r}\n"
            say(line * (DEBUG_DUMP_BYTES // len(line)))


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "/srv/etc/app.conf"
    try:
        cfg = ini(path, "app")
        port = int(cfg["listen_port"])
        for key in ("db_path", "redis_host", "redis_port"):
            cfg[key]
    except (OSError, KeyError, ValueError) as exc:
        say(f"FATAL cannot load config {path}: {type(exc).__name__}: {exc}")
        sys.exit(1)
    Handler.cfg = cfg
    try:
        server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    except OSError as exc:
        say(f"FATAL cannot listen on 127.0.0.1:{port}: {exc}")
        sys.exit(1)
    server.daemon_threads = True
    say(f"shop-api {VERSION} listening on 127.0.0.1:{port}")
    server.serve_forever()


if __name__ == "__main__":
    main()
