"""Pool: warm sandboxes handed out one episode at a time and reset in between."""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass

from agentgym.sandboxes.backends import Backend, open
from agentgym.sandboxes.errors import SandboxClosed, SandboxError
from agentgym.sandboxes.limits import Limits
from agentgym.sandboxes.privileges import Privileges
from agentgym.sandboxes.sandbox import Sandbox

log = logging.getLogger("sandboxes")


@dataclass
class PoolStats:
    """Counters for monitoring a pool."""

    created: int = 0
    """Sandboxes started, replacements included."""
    replaced: int = 0
    """Sandboxes thrown away because they died or failed to reset."""
    resets: int = 0
    """Successful resets of released sandboxes."""


class Pool:
    """Up to `size` sandboxes of one image, started ahead of time.

    `acquire()` hands out an idle sandbox (starting one if fewer than `size`
    are alive, else waiting); `release()` resets it in the background to the
    state it had right after start (files, processes and lifetime) and puts
    it back, or replaces it when it died or the reset failed. With `warm=True`
    the constructor returns once all `size` sandboxes are up.
    """

    def __init__(
        self,
        image: str,
        size: int,
        *,
        limits: Limits | None = None,
        backend: Backend = "docker",
        network: bool = False,
        workdir: str = "/work",
        warm: bool = True,
        start_workers: int = 4,
        privileges: Privileges | None = None,
    ):
        if size < 1:
            raise ValueError(f"Pool size={size} must be at least 1")
        self.image, self.size = image, size
        self.limits = Limits() if limits is None else limits
        self.backend, self.network, self.workdir = backend, network, workdir
        self.privileges = privileges
        self.stats = PoolStats()
        self._idle: queue.Queue[Sandbox] = queue.Queue()
        self._members: set[Sandbox] = set()
        self._starting = 0
        self._lock = threading.Lock()
        self._closed = False
        self._workers = ThreadPoolExecutor(max_workers=max(1, start_workers), thread_name_prefix="sandbox-pool")
        if warm:
            self.fill()

    # ---- public API ------------------------------------------------------

    def fill(self) -> None:
        """Start sandboxes until `size` are alive; raises the first start error."""
        with self._lock:
            missing = self.size - len(self._members) - self._starting
            self._starting += max(0, missing)
        futures = [self._workers.submit(self._start_one) for _ in range(max(0, missing))]
        wait(futures)
        for future in futures:
            sandbox = future.result()
            self._idle.put(sandbox)

    def acquire(self, timeout: float | None = None) -> Sandbox:
        """An idle, clean sandbox; waits up to `timeout` seconds (None: forever) when all are busy."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self._check_open()
            try:
                sandbox = self._idle.get_nowait()
            except queue.Empty:
                sandbox = None
            if sandbox is not None:
                if sandbox.alive:
                    return sandbox
                self._discard(sandbox)
                continue
            with self._lock:
                grow = len(self._members) + self._starting < self.size
                if grow:
                    self._starting += 1
            if grow:
                return self._start_one()
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError(f"no sandbox of {self.image} became free within {timeout}s (pool size {self.size})")
            try:
                sandbox = self._idle.get(timeout=0.5 if remaining is None else min(remaining, 0.5))
            except queue.Empty:
                continue
            self._idle.put(sandbox)

    def release(self, sandbox: Sandbox) -> None:
        """Give a sandbox back; it is reset (or replaced) in the background."""
        with self._lock:
            if sandbox not in self._members:
                raise ValueError(f"{sandbox!r} does not belong to this pool")
        if self._closed:
            self._discard(sandbox)
            return
        self._workers.submit(self._recycle, sandbox)

    @contextlib.contextmanager
    def lease(self, timeout: float | None = None) -> Iterator[Sandbox]:
        """`with pool.lease() as sb:` acquires a sandbox and releases it afterwards."""
        sandbox = self.acquire(timeout)
        try:
            yield sandbox
        finally:
            self.release(sandbox)

    @property
    def idle(self) -> int:
        """Sandboxes ready to hand out right now."""
        return self._idle.qsize()

    @property
    def live(self) -> int:
        """Sandboxes alive (idle, leased or being reset)."""
        with self._lock:
            return len(self._members)

    def close(self) -> None:
        """Stop every sandbox of the pool, leased ones included."""
        self._closed = True
        self._workers.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            members = list(self._members)
            self._members.clear()
        with ThreadPoolExecutor(max_workers=8) as closer:
            list(closer.map(Sandbox.close, members))

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals -------------------------------------------------------

    def _start_one(self) -> Sandbox:
        try:
            sandbox = open(self.image, backend=self.backend, limits=self.limits, network=self.network,
                           workdir=self.workdir, privileges=self.privileges)
        except BaseException:
            with self._lock:
                self._starting -= 1
            raise
        with self._lock:
            self._starting -= 1
            self._members.add(sandbox)
            self.stats.created += 1
        return sandbox

    def _recycle(self, sandbox: Sandbox) -> None:
        try:
            if not sandbox.alive:
                raise SandboxClosed(f"{sandbox!r} is no longer alive")
            sandbox.reset()
        except SandboxError as exc:
            log.info("replacing sandbox %s: %s", sandbox.id[:12], exc)
            self._discard(sandbox)
            self._replenish()
            return
        with self._lock:
            self.stats.resets += 1
        self._idle.put(sandbox)

    def _discard(self, sandbox: Sandbox) -> None:
        sandbox.close()
        with self._lock:
            if sandbox in self._members:
                self._members.discard(sandbox)
                self.stats.replaced += 1

    def _replenish(self) -> None:
        with self._lock:
            if self._closed or len(self._members) + self._starting >= self.size:
                return
            self._starting += 1
        try:
            self._idle.put(self._start_one())
        except Exception as exc:  # the next acquire() starts one itself and raises then
            log.warning("could not start a replacement sandbox of %s: %s", self.image, exc)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxClosed(f"the pool of {self.image} is closed")
