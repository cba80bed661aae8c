"""No leaked containers: owner labels, and a reaper for containers whose owner is gone.

Every sandbox container carries labels naming the process that created it
(host, boot id, pid and the pid's start time, so a recycled pid is not
mistaken for the owner). `reap_orphans` removes every labelled container of
this host whose owner is no longer running; it runs when a process first
talks to the engine, and at exit (atexit, SIGTERM, SIGHUP) a process removes
its own containers. A process killed with SIGKILL runs no handler: its
containers stop by themselves when their attach socket closes (the agent sees
end of input and exits, and the engine auto-removes the container), and the
next reaper run removes whatever is left.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import socket
import threading
import time
from functools import cache
from typing import Any

from agentgym.sandboxes.procfs import stat_fields

log = logging.getLogger("sandboxes")

LABEL = "agentgym.sandbox"
_owned: set[str] = set()
_owned_lock = threading.Lock()
_installed = False


@cache
def boot_id() -> str:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return "unknown"


def process_start(pid: int) -> str | None:
    """The start time of `pid` in clock ticks since boot, or None when it is not running."""
    fields = stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def owner_labels(pid: int | None = None) -> dict[str, str]:
    """The labels that tie a container to the process `pid` (default: this one)."""
    pid = os.getpid() if pid is None else pid
    return {
        LABEL: "1",
        "agentgym.owner_pid": str(pid),
        "agentgym.owner_start": process_start(pid) or "",
        "agentgym.owner_boot": boot_id(),
        "agentgym.owner_host": socket.gethostname(),
    }


def owner_alive(labels: dict[str, str]) -> bool:
    """False when the labelled owner is provably gone; containers of other hosts count as alive."""
    if labels.get("agentgym.owner_host") != socket.gethostname():
        return True
    if labels.get("agentgym.owner_boot") != boot_id():
        return False
    try:
        pid = int(labels.get("agentgym.owner_pid", ""))
    except ValueError:
        return False
    start = process_start(pid)
    return start is not None and start == labels.get("agentgym.owner_start")


def reap_orphans(client: Any) -> list[str]:
    """Remove this host's sandbox containers whose owner is dead; return their ids."""
    import docker.errors

    removed, in_progress = [], []
    for info in client.api.containers(all=True, filters={"label": LABEL}):
        if owner_alive(info.get("Labels") or {}):
            continue
        try:
            client.api.remove_container(info["Id"], force=True)
            removed.append(info["Id"])
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # the engine is already removing it (auto-remove after the agent exited)
                in_progress.append(info["Id"])
            else:
                log.warning("could not remove orphan sandbox %s: %s", info["Id"][:12], exc)
    removed += _wait_until_gone(client, in_progress)
    if removed:
        log.info("reaped %d orphaned sandbox container(s)", len(removed))
    return removed


def _wait_until_gone(client: Any, ids: list[str], timeout_s: float = 15.0) -> list[str]:
    """Wait (bounded) for removals the engine already started; return the ids that finished."""
    deadline = time.monotonic() + timeout_s
    pending = set(ids)
    while pending and time.monotonic() < deadline:
        live = {c["Id"] for c in client.api.containers(all=True, filters={"label": LABEL})}
        pending &= live
        if pending:
            time.sleep(0.1)
    for cid in pending:
        log.warning("orphan sandbox %s is still being removed after %.0f s", cid[:12], timeout_s)
    return [cid for cid in ids if cid not in pending]


def remove_own(client: Any) -> None:
    """Remove every container this process created and still holds."""
    import docker.errors

    with _owned_lock:
        ids = list(_owned)
        _owned.clear()
    for cid in ids:
        try:
            client.api.remove_container(cid, force=True)
        except docker.errors.APIError:
            pass


def remember(container_id: str) -> None:
    with _owned_lock:
        _owned.add(container_id)


def forget(container_id: str) -> None:
    with _owned_lock:
        _owned.discard(container_id)


def install(client: Any) -> None:
    """Once per process: reap orphans now, and clean up our own containers at exit."""
    global _installed
    if _installed:
        return
    _installed = True
    try:
        reap_orphans(client)
    except Exception as exc:  # a failed sweep must not stop the sandbox from opening
        log.warning("orphan sweep failed: %s", exc)
    atexit.register(remove_own, client)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            _chain_signal(sig, client)


def _chain_signal(sig: signal.Signals, client: Any) -> None:
    """Run `remove_own` on `sig`, then whatever handled it before (default: die by it)."""
    previous = signal.getsignal(sig)
    if previous is signal.SIG_IGN:
        return

    def handler(signum: int, frame: Any) -> None:
        remove_own(client)
        if callable(previous):
            previous(signum, frame)
        else:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    signal.signal(sig, handler)
