"""The env server's sessions: one env instance each, a slot limit, an idle timeout, shared snapshots.

A session's calls run one at a time (an env is a sequential object) in a
worker thread, so a slow step never blocks the server's event loop. Envs that
are not declared ``thread_safe`` are made as `ProcessEnv`s (one worker process
per session), exactly as the collector does in-process.

Fast calls skip the thread: once a method of a thread-safe, local env took
less than `INLINE_BELOW_S` on `INLINE_AFTER` calls in a row, the session runs
it directly on the event loop (the hop to a worker thread and back costs more
than a grid step). The first call that takes longer sends that method back to
a worker thread, so an env whose calls turn slow blocks the loop once, for
that one call. Proxies (worker processes, remote envs) always use a thread:
their calls wait on I/O.
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
from agentgym.runtime.proxy import ProxyEnv

#: a method whose calls took less than this (seconds) ...
INLINE_BELOW_S = 0.0005
#: ... this many times in a row runs on the event loop (see the module docstring)
INLINE_AFTER = 4


@dataclass
class Session:
    """One client's env."""

    id: str
    env: Any
    created: float = field(default_factory=time.monotonic)
    last_used: float = field(default_factory=time.monotonic)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    calls: int = 0
    #: whether fast calls may run on the event loop (a thread-safe, local env)
    inlinable: bool = False
    #: per method: how many calls in a row were fast
    fast_calls: dict[str, int] = field(default_factory=dict)
    #: the episode as the server saw it (the `state` call's answer)
    episode: dict[str, Any] = field(default_factory=dict)

    def state(self) -> dict[str, Any]:
        """What the server knows of this session's episode: task, steps, return, done, fingerprint, idle time."""
        return {"session_id": self.id, "calls": self.calls, "idle_s": round(time.monotonic() - self.last_used, 3),
                "episode_started": bool(self.episode), **self.episode}

    def observe(self, method: str, result: Any) -> None:
        """Follow the episode through `reset`, `step` and `restore` replies (dispatch's shapes)."""
        if method == "reset":
            info = result[1]
            self.episode = {"task_id": info.get("task_id"), "steps": 0, "return": 0.0, "terminated": False,
                            "truncated": False, "state_fingerprint": result[2]}
        elif method == "step" and self.episode:
            self.episode.update(steps=self.episode["steps"] + 1, terminated=result[2], truncated=result[3],
                                state_fingerprint=result[5])
            self.episode["return"] += result[1]
        elif method == "restore" and self.episode:
            self.episode.update(terminated=False, truncated=False, state_fingerprint=result[1], restored=True)

    def runs_inline(self, method: str) -> bool:
        return self.inlinable and self.fast_calls.get(method, 0) >= INLINE_AFTER

    def timed(self, method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """`dispatch` the call, counting whether it was fast."""
        began = time.perf_counter()
        try:
            return dispatch(self.env, method, args, kwargs)
        finally:
            fast = time.perf_counter() - began < INLINE_BELOW_S
            self.fast_calls[method] = self.fast_calls.get(method, 0) + 1 if fast else 0


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

    def __init__(self, factory: Callable[[], Any], *, max_sessions: int, idle_timeout_s: float | None,
                 inline_fast_calls: bool = True):
        self.factory, self.max_sessions, self.idle_timeout_s = factory, max_sessions, idle_timeout_s
        self.inline_fast_calls = inline_fast_calls
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
        inlinable = self.inline_fast_calls and getattr(env, "thread_safe", False) and not isinstance(env, ProxyEnv)
        session = Session(uuid.uuid4().hex, env, inlinable=inlinable)
        self.sessions[session.id] = session
        return session

    async def call(self, session: Session, method: str, args: list[Any], kwargs: dict[str, Any]) -> Any:
        """Run one env method in `session` (snapshots go through the shared store)."""
        async with session.lock:
            session.last_used = time.monotonic()
            session.calls += 1
            try:
                if method == "state":
                    return session.state()
                if method == "restore" and args:
                    args = [self.snapshots.get(args[0]), *args[1:]]
                if session.runs_inline(method):
                    result = session.timed(method, tuple(args), kwargs)
                else:
                    result = await asyncio.to_thread(session.timed, method, tuple(args), kwargs)
                if method == "snapshot":
                    result = self.snapshots.put(result)
                session.observe(method, result)
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
