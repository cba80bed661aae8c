"""An env cluster: N containers of the env server image, and a pool that spreads sessions over them.

    with EnvCluster("SQL-v0", replicas=4) as cluster:        # `agentgym envs up SQL-v0 --replicas 4`
        collector = Collector(EnvPool(cluster), policy)

How the collector reaches a container: containers run with ``--network none``
(no port can be published), so each replica serves on a unix socket in a
host directory mounted at /run/agentgym (``http+unix://`` endpoints). A
socket needs no network namespace, no port allocation and no iptables (the
engine here runs with ``--bridge=none``), and a file's permissions guard it.

Nothing outlives its owner: each container carries the sandbox reaper's owner
labels (orphans are removed by the next reaper sweep, and at exit the owner
removes its own), and the owner holds the container's stdin through the
engine's attach socket; the server exits when that closes, so even a SIGKILL
of the owner stops its containers, which the engine then removes
(``auto_remove``). Containers are non-root, read-only with a private /tmp,
without capabilities, and limited in memory and processes.

`EnvPool` is a zero-argument env factory for the collector: each env it makes
is a `RemoteEnv` on the replica with the fewest open envs, below each
replica's session limit. Give it the run's turn limit as `call_timeout_s`:
the server ends a call past it as a local worker's is ended (the session's
worker killed, its slot freed); opening a session has its own, longer limit
(`open_timeout_s`), since it starts a worker process in the container.
`EnvCluster.usage` reads each replica's whole cost (its cgroup's CPU seconds
and peak memory) from its ``/health``. `EnvCluster.watch` replaces a replica whose
container died; the episodes in flight on it end as infrastructure failures
(their connections drop), the others go on, and new envs go to the new replica.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import json
import os
import shutil
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentgym.errors import ConfigError, EnvInfraError
from agentgym.runtime.profile import container_profile
from agentgym.runtime.remote import RemoteEnv

LABEL_ENV = "agentgym.env"
#: the `EnvInfraError` kinds of a server that cannot be reached (gone, or restarted on another address)
UNREACHABLE = ("connection_refused", "connection_lost")
SOCKET = "env.sock"
#: a replica's socket directory in the temp dir: agentgym-env-<owner pid>-<its start time>-<random>
DIR_PREFIX = "agentgym-env-"


@dataclass
class Replica:
    """One env server container."""

    container_id: str
    directory: str
    endpoint: str
    attach: Any = None  #: the attach socket holding the container's stdin
    open_envs: int = 0
    max_sessions: int = 64


@dataclass
class EnvCluster:
    """N containers serving `env_id`; see the module docstring."""

    env_id: str
    replicas: int = 1
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    max_sessions: int = 64
    mem_limit: str = "2g"
    pids_limit: int = 512
    start_timeout_s: float = 180.0
    #: absolute host directories bound read-write at the same path in every replica, and the server's extra
    #: environment (a plugin env's code on PYTHONPATH, a directory that outlives the container)
    mounts: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    members: list[Replica] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.max_sessions < 1:
            raise ConfigError(f"an env cluster needs replicas >= 1 and max_sessions >= 1, got {self.replicas} and "
                              f"{self.max_sessions}")
        for mount in self.mounts:
            if not os.path.isabs(mount) or not os.path.isdir(mount):
                raise ConfigError(f"env cluster mount {mount!r} is not an existing absolute directory; name a host "
                                  "directory (it is bound at the same path in every replica)")
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        self.replaced = 0

    # ---- life cycle ----------------------------------------------------------------
    def start(self) -> EnvCluster:
        """Build the env's family image if needed, start every replica in parallel, wait until each is healthy."""
        from agentgym.registration import registry
        from agentgym.runtime.images import ensure_image, image_for

        self.image = ensure_image(image_for(self.env_id))
        remove_stale_directories()
        atexit.register(self.stop)  # a normal exit removes the socket directories too (the reaper only containers)
        # the id the server answers to: a "module:Name-v0" id is served as Name-v0 (its module imported first)
        self.served_id = registry[self.env_id].id
        started: list[Replica | BaseException] = [None] * self.replicas  # type: ignore[list-item]

        def one(i: int) -> None:
            try:
                started[i] = self._start_replica()
            except BaseException as exc:
                started[i] = exc

        threads = [threading.Thread(target=one, args=(i,)) for i in range(self.replicas)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.members = [r for r in started if isinstance(r, Replica)]
        errors = [r for r in started if not isinstance(r, Replica)]
        if errors:
            self.stop()
            raise errors[0]
        return self

    def _start_replica(self) -> Replica:
        """Start one replica and wait until it is healthy; on any failure (or a stop meanwhile) nothing of it is
        left: neither its container nor its socket directory."""
        from agentgym.sandboxes import reaper
        from agentgym.sandboxes.docker import client

        docker_client = client()
        profile = container_profile(docker_client, self.image)  # the default, or one running sandboxes inline
        directory = tempfile.mkdtemp(prefix=f"{DIR_PREFIX}{os.getpid()}-{reaper.process_start(os.getpid())}-",
                                     dir=socket_root())
        replica = Replica("", directory, "")
        try:
            os.chmod(directory, profile.directory_mode)  # the default server runs as the image's non-root user
            max_sessions = min(self.max_sessions, profile.max_sessions or self.max_sessions)
            command = [self.env_id, "--uds", f"/run/agentgym/{SOCKET}", "--max-sessions", str(max_sessions),
                       "--env-kwargs", json.dumps(self.env_kwargs), "--watch-stdin"]
            binds = {directory: {"bind": "/run/agentgym", "mode": "rw"},
                     **{m: {"bind": m, "mode": "rw"} for m in self.mounts}}
            host_config = docker_client.api.create_host_config(**profile.host_config(dict(
                network_mode="none", auto_remove=True, read_only=True, tmpfs={"/tmp": "size=1g,mode=1777"},
                binds=binds, cap_drop=["ALL"],
                security_opt=["no-new-privileges"], mem_limit=self.mem_limit, pids_limit=self.pids_limit)))
            labels = {**reaper.owner_labels(), reaper.LABEL: "env-server", LABEL_ENV: self.env_id}
            # stdin_open without detach also sets StdinOnce: when our attach socket closes, the server's stdin ends
            container = docker_client.api.create_container(self.image, command=command, stdin_open=True,
                                                           labels=labels, host_config=host_config,
                                                           environment={**profile.environment, **self.environment})
            replica.container_id = container["Id"]
            reaper.remember(replica.container_id)
            replica.attach = docker_client.api.attach_socket(replica.container_id, params={"stdin": 1, "stream": 1})
            docker_client.api.start(replica.container_id)
            replica.endpoint = (f"http+unix://{urllib.parse.quote(os.path.join(directory, SOCKET), safe='')}/"
                                f"{self.served_id}")
            replica.max_sessions = max_sessions
            self._wait_healthy(replica)
        except BaseException:
            self._remove(replica)
            raise
        return replica

    def _wait_healthy(self, replica: Replica) -> None:
        import httpx

        transport = httpx.HTTPTransport(uds=os.path.join(replica.directory, SOCKET))
        deadline = time.monotonic() + self.start_timeout_s
        with httpx.Client(transport=transport, base_url="http://agentgym-env", timeout=5) as http:
            while time.monotonic() < deadline:
                if self._stop.is_set():  # the cluster stops: the caller removes this replica
                    raise EnvInfraError(f"env cluster for {self.env_id} stopped while a replica started",
                                        kind="container_stopped")
                if not self._running(replica):
                    raise EnvInfraError(f"env container {replica.container_id[:12]} for {self.env_id} ({self.image}) "
                                        f"exited while starting: {self._why_exited(replica)}", kind="container_died")
                with contextlib.suppress(httpx.HTTPError):
                    if http.get("/health").status_code == 200:
                        return
                time.sleep(0.2)
        logs = self._logs(replica)
        raise EnvInfraError(f"env container for {self.env_id} ({self.image}) was not healthy within "
                            f"{self.start_timeout_s:g} s; its last log lines: {logs[-1500:] or '(none)'}",
                            kind="container_timeout")

    def stop(self) -> None:
        """Stop and remove every replica; idempotent. Waits for the watcher, so a replacement it was starting is
        removed too (a process exiting would otherwise kill the daemon thread with its socket directory made)."""
        self._stop.set()
        with self._lock:
            members, self.members = self.members, []
        for replica in members:
            self._remove(replica)
        watcher = self._watcher
        if watcher is not None and watcher is not threading.current_thread():
            watcher.join(timeout=30)

    def __enter__(self) -> EnvCluster:
        return self.start() if not self.members else self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---- health and replacement ------------------------------------------------------------
    @property
    def endpoints(self) -> list[str]:
        with self._lock:
            return [r.endpoint for r in self.members]

    def check(self) -> int:
        """Replace every replica whose container is gone; how many were replaced."""
        with self._lock:
            dead = [r for r in self.members if not self._running(r)]
        for replica in dead:
            fresh = self._start_replica()
            with self._lock:
                stopped = self._stop.is_set()  # stop() ran while it started: it removed the members, not this one
                if not stopped:
                    self.members = [fresh if r is replica else r for r in self.members]
            self._remove(fresh if stopped else replica)
            self.replaced += not stopped
        return len(dead)

    def watch(self, interval_s: float = 1.0) -> None:
        """Check the replicas every `interval_s` in a background thread until `stop`."""
        def loop() -> None:
            while not self._stop.wait(interval_s):
                with contextlib.suppress(Exception):
                    self.check()

        self._watcher = threading.Thread(target=loop, name=f"agentgym-env-cluster {self.env_id}", daemon=True)
        self._watcher.start()

    def usage(self) -> dict[str, dict[str, Any] | None]:
        """Per replica (its container id): ``{"cpu_s", "peak_mb", "sessions"}`` of its whole container so far (its
        cgroup, read by its server: the server, every session's worker, what the env started); None when its
        server cannot be reached or its cgroup cannot be read."""
        import httpx

        out: dict[str, dict[str, Any] | None] = {}
        for replica in list(self.members):
            transport = httpx.HTTPTransport(uds=os.path.join(replica.directory, SOCKET))
            try:
                with httpx.Client(transport=transport, base_url="http://agentgym-env", timeout=5) as http:
                    health = http.get("/health").json()
            except (httpx.HTTPError, ValueError):
                out[replica.container_id] = None
                continue
            cgroup = health.get("cgroup")
            out[replica.container_id] = {**cgroup, "sessions": health.get("sessions")} if cgroup else None
        return out

    def _running(self, replica: Replica) -> bool:
        import docker.errors

        from agentgym.sandboxes.docker import client

        try:
            return client().api.inspect_container(replica.container_id)["State"]["Running"]
        except docker.errors.NotFound:
            return False

    def _why_exited(self, replica: Replica) -> str:
        """What the server wrote before it exited (its startup error), else its last log lines."""
        from agentgym.runtime.container import STARTUP_ERROR

        with contextlib.suppress(OSError), open(os.path.join(replica.directory, STARTUP_ERROR)) as report:
            return report.read().strip()[-2000:]
        return self._logs(replica)

    def _logs(self, replica: Replica) -> str:
        from agentgym.sandboxes.docker import client

        with contextlib.suppress(Exception):
            return client().api.logs(replica.container_id, tail=20).decode(errors="replace").strip()
        return "(no logs: the container is gone)"

    def _remove(self, replica: Replica) -> None:
        import docker.errors

        from agentgym.sandboxes import reaper
        from agentgym.sandboxes.docker import client

        if replica.container_id:  # empty: the replica failed before its container was created
            with contextlib.suppress(docker.errors.APIError):
                client().api.remove_container(replica.container_id, force=True)
            reaper.forget(replica.container_id)
        if replica.attach is not None:
            with contextlib.suppress(Exception):
                replica.attach.close()
        shutil.rmtree(replica.directory, ignore_errors=True)


def socket_root() -> str:
    """Where replicas' socket directories go: the temp dir, or /tmp when the temp dir's path is so long that a
    socket in it would pass the 107-byte limit of a unix socket path (a deep TMPDIR, as a test's tmp_path):
    the host could then never connect, and the replica looked unhealthy while it served."""
    root = tempfile.gettempdir()
    longest = os.path.join(root, f"{DIR_PREFIX}{'9' * 7}-{'9' * 12}-{'x' * 8}", SOCKET)
    return root if len(longest.encode()) <= 100 else "/tmp"


def remove_stale_directories(root: str | None = None) -> list[str]:
    """Remove the replicas' socket directories in `root` (the temp dir) whose owner process is gone.

    A SIGKILLed owner runs no handler: the engine removes its containers (their stdin closes), but their host
    directories stay; the next cluster started on the machine removes them. The owner is read from the
    directory's name (pid and start time, so a recycled pid is not taken for it), not from a file the container
    could write. The removed paths."""
    from agentgym.sandboxes import reaper

    removed = []
    roots = [root] if root else sorted({tempfile.gettempdir(), socket_root()})
    for path in (p for r in roots for p in glob.glob(os.path.join(r, f"{DIR_PREFIX}*-*-*"))):
        pid, _, rest = os.path.basename(path)[len(DIR_PREFIX):].partition("-")
        start = rest.split("-", 1)[0]
        if pid.isdigit() and start.isdigit() and reaper.process_start(int(pid)) != start:
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    return removed


class EnvPool:
    """A zero-argument env factory over a cluster's replicas (or fixed endpoints); see the module docstring."""

    def __init__(self, source: EnvCluster | list[str], *, call_timeout_s: float | None = 60.0,
                 open_timeout_s: float | None = 300.0, env_id: str | None = None,
                 resolve: Callable[[], list[str]] | None = None):
        if isinstance(source, list) and not source:
            raise ConfigError("env_endpoints is empty; give at least one env server URL")
        self.source = source
        #: reads fixed endpoints again (servers restarted on new addresses, e.g. Ray env workers): see `refresh`
        self.resolve = resolve
        #: limit on one env call (the run's turn_timeout_s), enforced by the server; and on opening a session
        self.call_timeout_s, self.open_timeout_s = call_timeout_s, open_timeout_s
        self._open: dict[str, int] = {}
        self._peak: dict[str, int] = {}
        self._limits: dict[str, int] = {}
        self._down: set[str] = set()  #: a cluster's endpoints that refused a connection (their replica died)
        self._lock = threading.Lock()
        #: the name episodes get (default: the cluster's env id, or the first endpoint's URL)
        self.env_id = env_id or (source.env_id if isinstance(source, EnvCluster) else source[0])

    def endpoints(self) -> list[str]:
        return self.source.endpoints if isinstance(self.source, EnvCluster) else list(self.source)

    def live_endpoints(self) -> list[str]:
        """The endpoints not known to be down (a cluster's replica that refused a connection, not yet replaced)."""
        endpoints = self.endpoints()
        with self._lock:
            self._down &= set(endpoints)  # a replaced replica's endpoint is gone for good
            return [e for e in endpoints if e not in self._down]

    def mark_down(self, endpoint: str) -> None:
        """Take a cluster's endpoint out of the pool until the cluster replaces its replica (a new endpoint).

        Fixed endpoints are never marked: a restarted server comes back at the same URL."""
        if isinstance(self.source, EnvCluster):
            with self._lock:
                self._down.add(endpoint)

    def claim(self) -> str:
        """The live endpoint with the fewest open envs below its session limit, counted as one more open env."""
        endpoints = self.live_endpoints()
        with self._lock:
            free = [e for e in endpoints if self._open.get(e, 0) < (self._limit(e) or 1 << 30)]
            if not endpoints:
                raise EnvInfraError(f"every env server replica of {self.env_id} refused a connection (their "
                                    "containers died); the cluster's watch replaces them", kind="connection_refused")
            if not free:
                raise EnvInfraError(f"every env server replica of {self.env_id} is at its session limit; start more "
                                    "replicas or lower the collector's concurrency", kind="busy")
            endpoint = min(free, key=lambda e: self._open.get(e, 0))
            self._open[endpoint] = self._open.get(endpoint, 0) + 1
            self._peak[endpoint] = max(self._peak.get(endpoint, 0), self._open[endpoint])
            return endpoint

    def capacity(self) -> int | None:
        """Sessions the replicas take at once (the sum of their limits); None while a limit is still unknown.

        A cluster's limits are known from the start; a fixed endpoint's once an env has connected to it. The
        collector keeps its envs within this, so episodes wait for a session instead of meeting 'busy'.
        """
        for endpoint in self.endpoints():
            if self._limit(endpoint) is None:
                self._probe(endpoint)
        with self._lock:
            limits = [self._limit(e) for e in self.endpoints()]
        return None if None in limits else sum(limits)

    def free(self) -> int | None:
        """Sessions `claim` can open now: free below the limits of the live replicas (a replica known to be down
        offers none). None while a limit is still unknown (see `capacity`)."""
        endpoints = self.live_endpoints()
        with self._lock:
            limits = {e: self._limit(e) for e in endpoints}
            if None in limits.values():
                return None
            return sum(max(0, limit - self._open.get(e, 0)) for e, limit in limits.items())

    def _probe(self, endpoint: str) -> None:
        """Learn a fixed endpoint's session limit from its handshake (opens no session); unreachable: unknown."""
        try:
            env = RemoteEnv(endpoint, call_timeout_s=self.call_timeout_s, open_timeout_s=self.open_timeout_s)
        except Exception:
            return
        with contextlib.suppress(Exception):
            env.close()
        if env.max_sessions:
            with self._lock:
                self._limits[endpoint] = env.max_sessions

    def _limit(self, endpoint: str) -> int | None:
        if endpoint in self._limits:
            return self._limits[endpoint]
        if isinstance(self.source, EnvCluster):
            return next((r.max_sessions for r in self.source.members if r.endpoint == endpoint), None)
        return None

    def refresh(self) -> bool:
        """Read the endpoints again with `resolve` (False without one): a server that could not be reached may
        have been restarted elsewhere. An env that cannot reach its server before its episode began (making it,
        or its reset) refreshes and tries once more, so an episode never starts on a server known to be gone."""
        if self.resolve is None:
            return False
        endpoints = self.resolve()
        with self._lock:
            self.source = list(endpoints)
        return True

    def __call__(self) -> RemoteEnv:
        try:
            return self._make()
        except EnvInfraError as exc:
            if exc.kind not in UNREACHABLE or not self.refresh():
                raise
        return self._make()

    def _make(self) -> RemoteEnv:
        """A new env on a live endpoint; a cluster's replica that refuses the connection (its container died, the
        cluster has not replaced it yet) is marked down and the next one tried, so a dead replica fails no episode
        that has not begun."""
        for _ in range(len(self.endpoints())):
            endpoint = self.claim()
            try:
                env = _PooledEnv(endpoint, self, call_timeout_s=self.call_timeout_s,
                                 open_timeout_s=self.open_timeout_s)
                break
            except EnvInfraError as exc:
                self.release(endpoint)
                if exc.kind != "connection_refused" or not isinstance(self.source, EnvCluster):
                    raise
                self.mark_down(endpoint)
            except BaseException:
                self.release(endpoint)
                raise
        else:  # every replica refused: wait a while for the cluster to replace one, else claim() says so
            deadline = time.monotonic() + (self.open_timeout_s or 60.0)
            while not self.live_endpoints() and time.monotonic() < deadline:
                time.sleep(0.2)
            endpoint = self.claim()
            try:
                env = _PooledEnv(endpoint, self, call_timeout_s=self.call_timeout_s,
                                 open_timeout_s=self.open_timeout_s)
            except BaseException:
                self.release(endpoint)
                raise
        with self._lock:
            self._limits[endpoint] = env.max_sessions or self._limits.get(endpoint, 1 << 30)
        return env

    def release(self, endpoint: str) -> None:
        with self._lock:
            self._open[endpoint] = max(0, self._open.get(endpoint, 0) - 1)

    def load(self, peak: bool = False) -> dict[str, int]:
        """Open envs per endpoint (with `peak`: the most that were open at once)."""
        with self._lock:
            counts = self._peak if peak else self._open
            return {e: counts.get(e, 0) for e in self.endpoints()}


class _PooledEnv(RemoteEnv):
    """A `RemoteEnv` that moves off a replaced replica at its next reset and gives its slot back when closed."""

    def __init__(self, endpoint: str, pool: EnvPool, **kwargs: Any):
        self._pool, self._released = pool, False
        super().__init__(endpoint, **kwargs)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        try:
            return self._reset(seed, options)
        except EnvInfraError as exc:
            if exc.kind not in UNREACHABLE or not self._pool.refresh():
                raise
        self._drop_session(delete=False)  # its server is gone: start over on the live one
        return self._reset(seed, options)

    def _reset(self, seed: int | None, options: dict[str, Any] | None):
        if self.url not in self._pool.live_endpoints():  # its replica died (refused, or replaced): go to a live one
            self._move()
        try:
            return super().reset(seed=seed, options=options)
        except EnvInfraError as exc:
            if exc.kind != "connection_refused" or not isinstance(self._pool.source, EnvCluster):
                raise
        self._pool.mark_down(self.url)  # refused before any session opened: nothing began, so try a live replica
        self._move()
        return super().reset(seed=seed, options=options)

    def _move(self) -> None:
        old, new = self.url, self._pool.claim()
        try:
            self.move_to(new)
        except BaseException:
            self._pool.release(new)
            raise
        self._pool.release(old)

    def close(self) -> None:
        if not self._released:
            self._released = True
            self._pool.release(self.url)
        super().close()


def remove_env_containers(env_id: str | None = None) -> list[str]:
    """Remove every env server container (of `env_id`); their ids."""
    import docker.errors

    from agentgym.sandboxes.docker import client

    docker_client = client()
    wanted = f"{LABEL_ENV}={env_id}" if env_id else LABEL_ENV
    removed = []
    for info in docker_client.api.containers(all=True, filters={"label": wanted}):
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            docker_client.api.remove_container(info["Id"], force=True)
            removed.append(info["Id"])
    return removed
