"""The env server's sessions: one env instance each, a slot limit, an idle timeout, shared snapshots.

A session's calls run one at a time (an env is a sequential object) in a
worker thread, so a slow step never blocks the server's event loop. Envs that
are not declared ``thread_safe`` are made as `ProcessEnv`s (one worker process
per session), exactly as the collector does in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentgym.runtime.dispatch import dispatch


@dataclass
class Session:
    """One client's env."""

    id: str
    env: Any
    created: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    calls: int = 0


class SnapshotStore:
    """Snapshot tokens by id, shared by the sessions of one server (a client may restore into another session)."""

    def __init__(self, capacity: int = 10_000):
        self.capacity = capacity
        self._tokens: OrderedDict[str, Any] = OrderedDict()

    def put(self, token: Any) -> dict[str, str]:
        key = uuid.uuid4().hex
        self._tokens[key] = token
        while len(self._tokens) > self.capacity:
            self._tokens.popitem(last=False)
        return {"snapshot_id": key}

    def get(self, handle: Any) -> Any:
        key = handle.get("snapshot_id") if isinstance(handle, dict) else None
        if key not in self._tokens:
            raise KeyError(f"unknown snapshot {handle!r}: snapshots live in the server that took them (at most "
                           f"{self.capacity:,} of them, oldest dropped first)")
        return self._tokens[key]


class SessionManager:
    """Creates, finds and closes sessions; see the module docstring."""

    def __init__(self, factory: Callable[[], Any], *, max_sessions: int, idle_timeout_s: float | None):
        self.factory, self.max_sessions, self.idle_timeout_s = factory, max_sessions, idle_timeout_s
        self.sessions: dict[str, Session] = {}
        self.snapshots = SnapshotStore()
        self._opening = 0
        self.closed_idle = 0

    @property
    def full(self) -> bool:
        return len(self.sessions) + self._opening >= self.max_sessions

    async def open(self) -> Session:
        """A new session with a fresh env (the caller checked `full`)."""
        self._opening += 1
        try:
            env = await asyncio.to_thread(self.factory)
        finally:
            self._opening -= 1
        session = Session(uuid.uuid4().hex, env)
        self.sessions[session.id] = session
        return session

    async def call(self, session: Session, method: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Run one env method in `session` (snapshots go through the shared store)."""
        async with session.lock:
            session.last_used = time.monotonic()
            session.calls += 1
            try:
                if method == "restore" and args:
                    args = [self.snapshots.get(args[0]), *args[1:]]
                result = await asyncio.to_thread(dispatch, session.env, method, tuple(args), kwargs)
                if method == "snapshot":
                    result = self.snapshots.put(result)
                return result
            finally:
                session.last_used = time.monotonic()

    async def close(self, session_id: str) -> bool:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return False
        async with session.lock:
            await asyncio.to_thread(_close_quietly, session.env)
        return True

    async def close_all(self) -> None:
        for session_id in list(self.sessions):
            await self.close(session_id)

    async def reap_idle(self) -> int:
        """Close sessions idle for longer than the timeout; how many were closed."""
        if self.idle_timeout_s is None:
            return 0
        cutoff = time.monotonic() - self.idle_timeout_s
        stale = [s.id for s in self.sessions.values() if s.last_used < cutoff and not s.lock.locked()]
        for session_id in stale:
            await self.close(session_id)
        self.closed_idle += len(stale)
        return len(stale)


def _close_quietly(env: Any) -> None:
    with contextlib.suppress(Exception):
        env.close()
