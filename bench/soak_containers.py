"""The soak with its envs served from containers (``bench/soak.py --envs containers``): the run's config, the
fault injector that ``docker kill``s an env container mid-episode, and the check that no container is left.

The run's ``env_cluster`` starts ``--replicas`` containers of the ``code`` family image (the generic ``agentgym/env``
image plus inline sandboxes: the env's disk fills happen in them, bench/soak_workspace.py) serving
``soak_env:SoakMaze-v0``. The soak env's code is not in the image, and each container's socket directory is deleted
with it, so two host directories are bound into every replica at their own paths (``env_cluster.mounts``): bench/
(on the server's ``PYTHONPATH``, read only by convention) and the workdir's ``envlog/``, where the env appends its
start and fault logs (``tag_host``: tokens name the container, whose pids repeat). The logs outlive every container,
so the accounting joins them with the store as in process mode.

`ContainerKiller` picks, every ``--container-kill-every-s`` (a seeded draw around it), one of the trainer's env
containers that holds sessions, reads the sessions from its server's ``/health``, appends ``container_kill`` (the
container's short id, its socket directory, the sessions) to ``faults.jsonl``, fsynced, and then kills it. The
trainer's cluster replaces it (`EnvCluster.watch`); the episodes it held end as ``env_connection_lost`` infra
failures, which `soak_accounting.container_fault_match` matches to the kill.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from soak_accounting import CONTAINER_KILL, ENV_LOG_DIR, KILL_DONE
from soak_env import append_record

BENCH = Path(__file__).resolve().parent
ENV_ID = "soak_env:SoakMaze-v0"
LABEL_ENV, LABEL_OWNER = "agentgym.env", "agentgym.owner_pid"  #: agentgym.runtime.cluster's and the reaper's labels
SOCKET_DIR = "/run/agentgym"  #: where a replica's socket directory is mounted


def container_settings(work: Path, replicas: int, max_sessions: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the run's ``env_cluster``, the env_kwargs that differ from process mode): logs in ``envlog/``, bound in."""
    logs = work / ENV_LOG_DIR
    logs.mkdir(exist_ok=True)
    os.chmod(logs, 0o777)  # the server runs as the image's non-root user; the trainer's own config-check env (here)
    for name in ("faults.jsonl", "starts.jsonl"):  # may create a log first: make both writable by that user too
        (logs / name).touch()
        os.chmod(logs / name, 0o666)
    cluster = {"replicas": replicas, "max_sessions": max_sessions, "mounts": [str(BENCH), str(logs)],
               "environment": {"PYTHONPATH": str(BENCH), "PYTHONDONTWRITEBYTECODE": "1"}}
    kwargs = {"fault_log": str(logs / "faults.jsonl"), "start_log": str(logs / "starts.jsonl"), "tag_host": True}
    return cluster, kwargs


def env_containers(owner_pid: int | None = None, *, all_states: bool = False) -> list[dict[str, Any]]:
    """The soak env's containers (of the trainer `owner_pid`, else of any owner), as the engine lists them."""
    from agentgym.sandboxes.docker import client

    labels = [f"{LABEL_ENV}={ENV_ID}"] + ([f"{LABEL_OWNER}={owner_pid}"] if owner_pid is not None else [])
    return client().api.containers(all=all_states, filters={"label": labels})


def socket_directory(container: dict[str, Any]) -> str | None:
    """The host directory mounted at /run/agentgym in `container` (its server's socket is there)."""
    return next((m["Source"] for m in container.get("Mounts", []) if m.get("Destination") == SOCKET_DIR), None)


def open_sessions(directory: str) -> int | None:
    """The sessions the server in `directory` holds (its ``/health``), None when it does not answer."""
    import httpx

    transport = httpx.HTTPTransport(uds=os.path.join(directory, "env.sock"))
    try:
        with httpx.Client(transport=transport, base_url="http://agentgym-env", timeout=2.0) as http:
            return int(http.get("/health").json()["sessions"])
    except (httpx.HTTPError, ValueError, KeyError):
        return None


class ContainerKiller(threading.Thread):
    """Kills one of the trainer's env containers that holds sessions, every seeded interval; see the module doc."""

    def __init__(self, fault_log: Path, trainer_pid: Callable[[], int | None], *, seed: int, every_s: float):
        super().__init__(daemon=True, name="soak-container-killer")
        self.fault_log, self.trainer_pid, self.every_s = fault_log, trainer_pid, every_s
        self.rng = random.Random(f"{seed}:containers")
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.wait(self.rng.uniform(0.5, 1.5) * self.every_s):
            while not self._halt.is_set() and not self._kill_one():
                self._halt.wait(0.5)  # no container of a live trainer holds a session yet: look again soon

    def _kill_one(self) -> bool:
        """Kill one container with open sessions (logged first); False when there was none to kill."""
        import docker.errors
        from agentgym.sandboxes.docker import client

        pid = self.trainer_pid()
        if pid is None:
            return False
        held = []
        for container in sorted(env_containers(pid), key=lambda c: c["Id"]):
            directory, read_at = socket_directory(container), time.time()
            sessions = open_sessions(directory) if directory else None
            if sessions:
                held.append((container, directory, sessions, read_at))
        if not held:
            return False
        container, directory, sessions, read_at = self.rng.choice(held)
        # `sessions` is what its server held at `read_at`: more may open before the kill (the accounting allows
        # the episodes started on it in between)
        record = {"kind": CONTAINER_KILL, "container": container["Id"][:12], "directory": os.path.basename(directory),
                  "sessions": sessions, "sessions_read_at": read_at, "trainer_pid": pid, "time": time.time()}
        append_record(str(self.fault_log), record)
        try:
            client().api.kill(container["Id"])
        except docker.errors.APIError as exc:  # gone meanwhile (its trainer was killed): logged, not counted as a hit
            append_record(str(self.fault_log), {"kind": "container_kill_missed", "container": record["container"],
                                                "error": str(exc)[:200], "time": time.time()})
        else:  # when the container was gone: an episode may begin on it between the record above and the kill
            append_record(str(self.fault_log), {"kind": KILL_DONE, "container": record["container"],
                                                "time": time.time()})
        return True

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)


def leaked_containers(owner_pids: set[int], wait_s: float = 30.0) -> list[str]:
    """The soak env's containers of these trainers still present after up to `wait_s` (a SIGKILLed owner's go once
    the engine sees their stdin close and removes them)."""
    deadline = time.monotonic() + wait_s
    while True:
        with contextlib.suppress(Exception):
            left = [c["Id"][:12] for c in env_containers(all_states=True)
                    if int(c["Labels"].get(LABEL_OWNER, -1)) in owner_pids]
            if not left or time.monotonic() >= deadline:
                return left
        if time.monotonic() >= deadline:
            return ["(docker did not answer)"]
        time.sleep(1.0)
