"""SRE-v0's tools: their schemas, argument checks, and what each runs inside the system container.

Observers read and never change anything; mutating actions change the
system and pass the task's `Policy` first (see `policy.py`); `diagnose` and
`submit` are answers and touch nothing. Every command runs as root inside
the system container with a timeout; output is cut at a visible marker.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentgym.envs.sre.faults import COMPONENTS, KINDS, SERVICES
from agentgym.envs.sre.system import System

from agentgym.errors import MalformedActionError

LOGS = {"app": "/srv/log/app.log", "worker": "/srv/log/worker.log", "redis": "/srv/log/redis.log",
        "nginx": "/srv/log/nginx/error.log", "nginx-access": "/srv/log/nginx/access.log",
        "supervisor": "/srv/log/supervisor.log"}
PORTS = (8080, 8000)
RUN_TIMEOUT_S = 20.0
OBSERVE_TIMEOUT_S = 10.0


def _schema(name: str, description: str, properties: dict[str, Any] | None = None,
            required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": properties or {}, "required": list(required),
                       "additionalProperties": False}}}


def _str(description: str, enum: tuple[str, ...] | None = None) -> dict[str, Any]:
    return {"type": "string", "description": description, **({"enum": list(enum)} if enum else {})}


SCHEMAS = [
    _schema("status", "Observe: the supervisor's view of every service (state, pid, why it stopped)."),
    _schema("logs", "Observe: the last lines of a service's log.",
            {"service": _str("whose log", tuple(LOGS)), "lines": {"type": "integer", "description": "1-200"}},
            ("service",)),
    _schema("ps", "Observe: every process (pid, user, state, memory, command)."),
    _schema("cat", "Observe: a file's contents.", {"path": _str("absolute path")}, ("path",)),
    _schema("ls", "Observe: a directory listing with owners, modes and sizes.", {"path": _str("absolute path")},
            ("path",)),
    _schema("curl", "Observe: GET a URL path on 127.0.0.1 (port 8080 nginx, 8000 the app), with headers.",
            {"path": _str("e.g. /health"), "port": {"type": "integer", "enum": list(PORTS)}}, ("path",)),
    _schema("metrics", "Observe: disk, memory, processes, log sizes and Redis client counts."),
    _schema("query", "Observe: one read-only SQL statement on the app's SQLite database (EXPLAIN works).",
            {"sql": _str("a SELECT, EXPLAIN QUERY PLAN or read-only PRAGMA")}, ("sql",)),
    _schema("restart", "Act: restart a service through the supervisor.", {"service": _str("which", SERVICES)},
            ("service",)),
    _schema("edit_config", "Act: replace the one occurrence of `find` with `replace` in a file under /srv/etc.",
            {"path": _str("e.g. /srv/etc/app.conf"), "find": _str("exact text, must occur once"),
             "replace": _str("the new text")}, ("path", "find", "replace")),
    _schema("run", "Act: run a shell command as root inside the system (time-limited, 20 s by default).",
            {"command": _str("a shell command")}, ("command",)),
    _schema("diagnose", "Answer: name a root cause (optional, scored; once per fault).",
            {"kind": _str("the fault kind", tuple(KINDS)), "component": _str("where", COMPONENTS)},
            ("kind", "component")),
    _schema("submit", "Answer: you are done; the system's health checks decide the reward."),
]
NAMES = tuple(s["function"]["name"] for s in SCHEMAS)
_REQUIRED = {s["function"]["name"]: tuple(s["function"]["parameters"]["required"]) for s in SCHEMAS}
_ENUMS = {(s["function"]["name"], k): tuple(v["enum"]) for s in SCHEMAS
          for k, v in s["function"]["parameters"]["properties"].items() if "enum" in v}


@dataclass(frozen=True)
class ToolOutput:
    """What one tool call produced."""

    text: str
    exit_code: int = 0


def validate(name: str, arguments: dict[str, Any]) -> None:
    """Raise MalformedActionError for an unknown tool, a missing argument or a value outside its enum."""
    if name not in NAMES:
        raise MalformedActionError(f"unknown tool {name!r}", kind="unknown_tool",
                                   hint=f"use one of: {', '.join(NAMES)}")
    missing = [k for k in _REQUIRED[name] if k not in arguments]
    if missing:
        raise MalformedActionError(f"{name} needs the argument(s) {missing}", kind="invalid_arguments",
                                   hint=f"see the {name} tool's schema")
    for (tool, key), allowed in _ENUMS.items():
        if tool == name and key in arguments and arguments[key] not in allowed:
            raise MalformedActionError(f"{name}: {key}={arguments[key]!r} is not one of {list(allowed)}",
                                       kind="invalid_arguments", hint=f"pick {key} from {list(allowed)}")
    for key, value in arguments.items():
        if key not in ("lines", "port") and not isinstance(value, str):
            raise MalformedActionError(f"{name}: {key} must be a string", kind="invalid_arguments")


def _path(arguments: dict[str, Any]) -> str:
    path = str(arguments["path"])
    if not path.startswith("/") or "\x00" in path:
        raise MalformedActionError(f"path {path!r} must be absolute", kind="invalid_arguments",
                                   hint="e.g. /srv/etc/app.conf")
    return path


def _lines(arguments: dict[str, Any]) -> int:
    try:
        return max(1, min(200, int(arguments.get("lines", 40))))
    except (TypeError, ValueError):
        raise MalformedActionError("logs: lines must be an integer 1-200", kind="invalid_arguments") from None


def _curl(arguments: dict[str, Any]) -> list[str]:
    path, port = str(arguments["path"]), arguments.get("port", 8080)
    if not path.startswith("/") or any(c.isspace() for c in path):
        raise MalformedActionError(f"curl: path {path!r} must start with / and have no spaces",
                                   kind="invalid_arguments", hint="e.g. /health")
    if port not in PORTS:
        raise MalformedActionError(f"curl: port must be one of {list(PORTS)}", kind="invalid_arguments")
    return ["curl", "-sS", "-i", "-m", "4", f"http://127.0.0.1:{port}{path}"]


COMMANDS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "status": lambda a: ["/opt/sre/bin/svc", "status"],
    "logs": lambda a: ["tail", "-n", str(_lines(a)), LOGS[a["service"]]],
    "ps": lambda a: ["ps", "-eo", "pid,user,stat,rss,args", "--cols", "160"],
    "cat": lambda a: ["cat", "--", _path(a)],
    "ls": lambda a: ["ls", "-la", "--", _path(a)],
    "curl": _curl,
    "metrics": lambda a: ["/opt/sre/bin/metrics"],
    "query": lambda a: ["/opt/sre/bin/query", str(a["sql"])],
    "restart": lambda a: ["/opt/sre/bin/svc", "restart", a["service"]],
    "run": lambda a: ["/bin/sh", "-c", str(a["command"])],
}


def execute(system: System, name: str, arguments: dict[str, Any], run_timeout_s: float = RUN_TIMEOUT_S) -> ToolOutput:
    """Run one observer or mutating tool (not diagnose/submit); SystemDied propagates."""
    if name == "edit_config":
        return _edit_config(system, arguments)
    argv = COMMANDS[name](arguments)
    timeout = {"run": run_timeout_s, "restart": RUN_TIMEOUT_S}.get(name, OBSERVE_TIMEOUT_S)
    result = system.exec(argv, timeout=timeout)
    text = result.stdout + (("\n" if result.stdout else "") + result.stderr if result.stderr.strip() else "")
    if name == "ps":
        text = "\n".join(line for line in text.splitlines() if "sandboxes/agent.py" not in line
                         and "ps -eo pid,user" not in line)
    if result.timed_out:
        text += f"\n[the command ran past {timeout:g}s and was killed]"
    elif result.exit_code != 0 and name in ("run", "restart", "query", "cat", "ls"):
        text += f"\n[exit status {result.exit_code}]"
    return ToolOutput(text.strip() or "(no output)", result.exit_code)


def _edit_config(system: System, arguments: dict[str, Any]) -> ToolOutput:
    path, find, replace = _path(arguments), str(arguments["find"]), str(arguments["replace"])
    if not path.startswith("/srv/etc/") or "/.." in path:
        raise MalformedActionError(f"edit_config only edits files under /srv/etc/, not {path!r}",
                                   kind="invalid_arguments", hint="use run for anything else")
    if not find:
        raise MalformedActionError("edit_config: find must not be empty", kind="invalid_arguments")
    quoted = shlex.quote(path)
    read = system.exec(["cat", "--", path], timeout=OBSERVE_TIMEOUT_S)
    if read.exit_code != 0:
        return ToolOutput(f"edit_config: cannot read {path}: {read.stderr.strip()}", 1)
    count = read.stdout.count(find)
    if count != 1:
        return ToolOutput(f"edit_config: the text occurs {count} times in {path}; it must occur exactly once "
                          "(nothing was changed)", 1)
    new = read.stdout.replace(find, replace, 1)
    write = system.exec(["/bin/sh", "-c", f"cat > {quoted}"], stdin=new, timeout=OBSERVE_TIMEOUT_S)
    if write.exit_code != 0:
        return ToolOutput(f"edit_config: cannot write {path}: {write.stderr.strip()}", 1)
    return ToolOutput(f"edited {path}: replaced 1 occurrence (restart the service to apply it)")
