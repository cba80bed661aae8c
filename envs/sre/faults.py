"""The fault kinds of SRE-v0: how each breaks the system, how to repair it, and what to call it.

A `Fault` is one injected failure: a kind, the component it hits and a
variant. Each kind renders shell run as root inside the system container by
``sre-start`` (``pre`` before the supervisor starts, ``post`` once every
program has settled) and the scripted repair as a list of tool calls.
`diagnose(kind, component)` is scored against ``(kind, component)``.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

ETC = "/srv/etc"
CONF = {"app": f"{ETC}/app.conf", "worker": f"{ETC}/worker.conf", "nginx": f"{ETC}/nginx.conf",
        "redis": f"{ETC}/redis.conf"}
PORTS = {"app": 8000, "redis": 6379, "nginx": 8080}
SERVICES = ("app", "worker", "redis", "nginx")
COMPONENTS = ("app", "worker", "redis", "nginx", "db", "disk")
STALE_HEARTBEAT = "touch -d '-1 minute' /srv/run/worker.heartbeat"

Call = dict[str, Any]


def call(name: str, **arguments: Any) -> Call:
    """One tool call as the solver sends it."""
    return {"name": name, "arguments": arguments}


@dataclass(frozen=True)
class Fault:
    """One injected failure."""

    kind: str
    component: str
    variant: str = ""
    params: tuple[tuple[str, str], ...] = ()
    """Seeded details (a wrong password, a release number...) as sorted pairs, so faults stay hashable."""

    @property
    def p(self) -> dict[str, str]:
        return dict(self.params)

    @property
    def label(self) -> str:
        return "-".join(x for x in (self.kind, self.component, self.variant) if x)


@dataclass(frozen=True)
class Injection:
    pre: str = ""
    post: str = ""


@dataclass(frozen=True)
class FaultKind:
    """How one kind of fault is injected and repaired."""

    name: str
    summary: str
    variants: dict[str, tuple[str, ...]]
    """Component -> its variants ('' when the kind has none)."""
    inject: Callable[[Fault], Injection]
    repair: Callable[[Fault], list[Call]]
    needs_run: bool
    """Whether the repair needs `run` (tasks whose policy forbids `run` avoid these)."""
    fills_disk: bool = False
    param_keys: tuple[str, ...] = field(default=())


def _pid(service: str) -> str:
    return f"$(/opt/sre/bin/svc pid {service})"


def _sed(path: str, old: str, new: str) -> str:
    return f"sed -i {shlex.quote(f's|{old}|{new}|')} {path}"


# ---- crashed / hung process ------------------------------------------------------------------

def _crash(f: Fault) -> Injection:
    post = f"kill -{f.variant} -{_pid(f.component)}"
    if f.component == "worker":
        post += f"; sleep 0.2; {STALE_HEARTBEAT}"
    return Injection(post=post + "; sleep 0.3")


def _hang(f: Fault) -> Injection:
    post = f"kill -STOP -{_pid(f.component)}"
    if f.component == "worker":
        post += f"; {STALE_HEARTBEAT}"
    return Injection(post=post)


def _restart(f: Fault) -> list[Call]:
    return [call("restart", service=f.component)]


# ---- wrong config value ----------------------------------------------------------------------

WRONG_CONFIG = {  # (component, variant) -> (file, right text, wrong text)
    ("nginx", "upstream_port"): ("nginx", "server 127.0.0.1:8000;", "server 127.0.0.1:8001;"),
    ("nginx", "proxy_path"): ("nginx", "proxy_pass http://shop_api;", "proxy_pass http://shop_api/api/;"),
    ("app", "redis_port"): ("app", "redis_port = 6379", "redis_port = 6380"),
    ("app", "db_path"): ("app", "db_path = /srv/data/app.db", "db_path = /srv/data/shop.db"),
    ("worker", "db_path"): ("worker", "db_path = /srv/data/app.db", "db_path = /srv/data/app.sqlite"),
    ("worker", "redis_port"): ("worker", "redis_port = 6379", "redis_port = 6389"),
}


def _wrong_config(f: Fault) -> Injection:
    conf, right, wrong = WRONG_CONFIG[(f.component, f.variant)]
    return Injection(pre=_sed(CONF[conf], right, wrong))


def _fix_config(f: Fault) -> list[Call]:
    conf, right, wrong = WRONG_CONFIG[(f.component, f.variant)]
    return [call("edit_config", path=CONF[conf], find=wrong, replace=right), call("restart", service=f.component)]


# ---- bad file permission ---------------------------------------------------------------------

def _bad_permission(f: Fault) -> Injection:
    if f.component == "db":
        return Injection(post="chown root:root /srv/data/app.db && chmod 600 /srv/data/app.db")
    return Injection(pre=f"chmod 600 {CONF[f.component]}")


def _fix_permission(f: Fault) -> list[Call]:
    if f.component == "db":
        return [call("run", command="chown svc:svc /srv/data/app.db && chmod 644 /srv/data/app.db")]
    return [call("run", command=f"chmod 644 {CONF[f.component]}"), call("restart", service=f.component)]


# ---- full disk / runaway log -----------------------------------------------------------------

FILLERS = {"backup": "/srv/data/backup-{day}.tar", "core": "/srv/log/core.{pid}", "export": "/srv/run/export-{day}.csv"}


def _fill(path: str, source: str = "head -c 2147483648 /dev/zero") -> str:
    """Fill /srv until writes fail with ENOSPC (the shell keeps going)."""
    return f"{{ {source} > {path}; }} 2>/dev/null || true"


def _filler_path(f: Fault) -> str:
    return FILLERS[f.variant].format(**f.p)


def _disk_full(f: Fault) -> Injection:
    return Injection(post=_fill(_filler_path(f)))


def _free_disk(f: Fault) -> list[Call]:
    return [call("run", command=f"rm -f {_filler_path(f)}")]


def _runaway_log(f: Fault) -> Injection:
    log = f"/srv/log/{f.component}.log"
    spam = "yes 'DEBUG dump of request context: headers={...} rows=[...] cache=[...]'"
    return Injection(pre=_sed(CONF[f.component], "log_level = info", "log_level = debug"),
                     post=_fill(log, spam))


def _fix_log_level(f: Fault) -> list[Call]:
    return [call("edit_config", path=CONF[f.component], find="log_level = debug", replace="log_level = info"),
            call("restart", service=f.component)]


# ---- exhausted connections -------------------------------------------------------------------

def _leak_connections(f: Fault) -> Injection:
    tool = f"/opt/sre/tools/{f.variant}"
    wait = (f"i=0; while [ ! -s /srv/run/{f.variant}.pid ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done")
    return Injection(post=f"setsid -f {tool} </dev/null >/dev/null 2>&1; {wait}")


def _kill_leaker(f: Fault) -> list[Call]:
    return [call("run", command=f"kill $(cat /srv/run/{f.variant}.pid)")]


# ---- port conflict ---------------------------------------------------------------------------

def _squatter(f: Fault) -> str:
    port = PORTS[f.component]
    if f.variant == "http.server":
        return f"python3 -m http.server {port} --bind 127.0.0.1 --directory /srv/run"
    return f"nc -lk 127.0.0.1 {port}"


def _port_conflict(f: Fault) -> Injection:
    port = PORTS[f.component]
    wait = f"i=0; until nc -z 127.0.0.1 {port} || [ $i -ge 100 ]; do sleep 0.05; i=$((i+1)); done"
    return Injection(pre=f"setsid -f {_squatter(f)} </dev/null >/dev/null 2>&1; {wait}")


def _evict_squatter(f: Fault) -> list[Call]:
    return [call("run", command=f"pkill -f {shlex.quote('^' + _squatter(f))}"), call("restart", service=f.component)]


# ---- bad credentials -------------------------------------------------------------------------

def _bad_credentials(f: Fault) -> Injection:
    right, wrong = f.p["password"], f.p["wrong"]
    return Injection(pre=_sed(CONF[f.component], f"redis_password = {right}", f"redis_password = {wrong}".rstrip()))


def _fix_credentials(f: Fault) -> list[Call]:
    right, wrong = f.p["password"], f.p["wrong"]
    return [call("edit_config", path=CONF[f.component], find=f"redis_password = {wrong}".rstrip(),
                 replace=f"redis_password = {right}"), call("restart", service=f.component)]


# ---- bad deploy ------------------------------------------------------------------------------

DEPLOY_BUGS = {  # variant -> sed expression applied to the new release's app.py
    "syntax": r"$a def broken(:",
    "missing_module": r"s|^import json$|import json\nimport ujson|",
    "renamed_column": r"s|sum(total_cents)|sum(total_amount)|",
    "redis_command": r's|client.call("PING")|client.call("PNG")|',
}


def _bad_deploy(f: Fault) -> Injection:
    version = f.p["version"]
    new = f"/srv/app/releases/{version}"
    set_version = shlex.quote(f's|^VERSION = .*|VERSION = "{version}"|')
    script = (f"cp -a /srv/app/releases/1.4.2 {new} && "
              f"sed -i {shlex.quote(DEPLOY_BUGS[f.variant])} {new}/app.py && "
              f"sed -i {set_version} {new}/app.py && "
              f"/opt/sre/bin/deploy activate {version} >/dev/null")
    return Injection(pre=script)


def _rollback(f: Fault) -> list[Call]:
    return [call("run", command="/opt/sre/bin/deploy rollback"), call("restart", service="app")]


# ---- slow query, missing index ---------------------------------------------------------------

SQLITE_WAIT = "-cmd '.timeout 5000'"  # wait for the app's and worker's locks instead of failing at once
INDEXES = {
    "idx_orders_customer": "CREATE INDEX idx_orders_customer ON orders (customer_id)",
    "idx_items_order": "CREATE INDEX idx_items_order ON order_items (order_id)",
    "idx_customers_email": "CREATE UNIQUE INDEX idx_customers_email ON customers (email)",
}


def _drop_index(f: Fault) -> Injection:
    return Injection(post=f"sqlite3 {SQLITE_WAIT} /srv/data/app.db 'DROP INDEX {f.variant}'")


def _create_index(f: Fault) -> list[Call]:
    return [call("run", command=f"sqlite3 {SQLITE_WAIT} /srv/data/app.db {shlex.quote(INDEXES[f.variant])}")]


KINDS: dict[str, FaultKind] = {k.name: k for k in [
    FaultKind("crashed_process", "a service process died and stays down",
              {c: ("KILL", "SEGV", "ABRT") for c in SERVICES}, _crash, _restart, needs_run=False),
    FaultKind("hung_process", "a service process is stopped (hung) and answers nothing",
              {c: ("",) for c in SERVICES}, _hang, _restart, needs_run=False),
    FaultKind("wrong_config", "a config file holds a wrong value",
              {c: tuple(v for (cc, v) in WRONG_CONFIG if cc == c) for c in ("nginx", "app", "worker")},
              _wrong_config, _fix_config, needs_run=False),
    FaultKind("bad_permission", "a file the service needs is not readable by it",
              {c: ("",) for c in ("app", "worker", "nginx", "redis", "db")}, _bad_permission, _fix_permission,
              needs_run=True),
    FaultKind("disk_full", "a stray file filled the disk", {"disk": tuple(FILLERS)}, _disk_full, _free_disk,
              needs_run=True, fills_disk=True, param_keys=("day", "pid")),
    FaultKind("connection_exhaustion", "a client leaks Redis connections until Redis refuses more",
              {"redis": ("report-exporter", "metrics-pusher", "cache-warmer")}, _leak_connections, _kill_leaker,
              needs_run=True),
    FaultKind("port_conflict", "another process holds a service's port, so the service cannot start",
              {c: ("http.server", "nc") for c in ("app", "redis", "nginx")}, _port_conflict, _evict_squatter,
              needs_run=True),
    FaultKind("runaway_log", "a service logs at debug level and its log filled the disk",
              {c: ("",) for c in ("worker", "app")}, _runaway_log, _fix_log_level, needs_run=False,
              fills_disk=True),
    FaultKind("bad_credentials", "a service has a wrong Redis password in its config",
              {c: ("typo", "old", "empty") for c in ("app", "worker")}, _bad_credentials, _fix_credentials,
              needs_run=False, param_keys=("password", "wrong")),
    FaultKind("bad_deploy", "the active release of the app is broken and must be rolled back",
              {"app": tuple(DEPLOY_BUGS)}, _bad_deploy, _rollback, needs_run=True, param_keys=("version",)),
    FaultKind("missing_index", "an index was dropped, so a query the app runs is too slow",
              {"db": tuple(INDEXES)}, _drop_index, _create_index, needs_run=True),
]}


def injection(faults: list[Fault] | tuple[Fault, ...]) -> Injection:
    """The pre and post scripts of several faults together; faults that fill the disk go last (the
    others' scripts may need to write)."""
    parts = [KINDS[f.kind].inject(f) for f in sorted(faults, key=lambda f: KINDS[f.kind].fills_disk)]
    return Injection(pre="\n".join(p.pre for p in parts if p.pre), post="\n".join(p.post for p in parts if p.post))
