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

A call may carry a time limit (the client's turn limit). A call in a thread
that passes it is abandoned: the session is closed at once (its slot freed)
and its env closed, which kills a worker process stuck in the call; an env in
the server's own process is closed when its call returns. The call raises
`EnvInfraError` (kind ``env_timeout``). A session whose worker process died is
closed too, so a dead env never holds a slot.

Every session reports what its env's process used so far (`Session.usage`,
sent with every reply): a worker process's CPU seconds and peak memory from
/proc; None for an env in the server's own process, whose usage is not its
own.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentgym.cost import env_usage
from agentgym.errors import EnvInfraError
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

    def usage(self) -> dict[str, float] | None:
        """``{"cpu_s", "peak_mb"}`` used so far by the process the env runs in; None in the server's own process."""
        used = env_usage(self.env)
        return None if used is None else {"cpu_s": round(used[0], 3), "peak_mb": round(used[1], 1)}

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
        self.dropped = 0  #: sessions closed because their call timed out or their worker died

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

    async def call(self, session: Session, method: str, args: list[Any], kwargs: dict[str, Any],
                   timeout_s: float | None = None) -> Any:
        """Run one env method in `session` (snapshots go through the shared store) within `timeout_s`."""
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
                    result = await self._in_thread(session, method, tuple(args), kwargs, timeout_s)
                if method == "snapshot":
                    result = self.snapshots.put(result)
                session.observe(method, result)
                return result
            except EnvInfraError:
                if getattr(session.env, "alive", True) is False:  # its worker died or was killed: free the slot
                    self._drop(session)
                    await asyncio.to_thread(_close_quietly, session.env)
                raise
            finally:
                session.last_used = time.monotonic()

    async def _in_thread(self, session: Session, method: str, args: tuple[Any, ...], kwargs: dict[str, Any],
                         timeout_s: float | None) -> Any:
        """The call in a worker thread; past `timeout_s` the session is closed and the call abandoned."""
        running = asyncio.ensure_future(asyncio.to_thread(session.timed, method, args, kwargs))
        try:
            return await asyncio.wait_for(asyncio.shield(running), timeout_s)
        except TimeoutError:
            pass
        self._drop(session)
        running.add_done_callback(_retrieved)
        if isinstance(session.env, ProxyEnv):  # a worker process (or another server): closing it ends the call
            await asyncio.to_thread(_close_quietly, session.env)
            fate = "its worker was killed"
        else:  # a thread cannot be stopped: the env is closed once its call returns
            running.add_done_callback(lambda _: _close_in_thread(session.env))
            fate = "its env is closed when the call returns"
        raise EnvInfraError(f"the env did not answer {method} within {timeout_s:g} s (the client's limit); session "
                            f"{session.id} was closed and {fate}", kind="env_timeout")

    def _drop(self, session: Session) -> None:
        """Forget `session` (its slot is free); the caller closes its env."""
        if self.sessions.get(session.id) is session:
            del self.sessions[session.id]
            self.dropped += 1

    async def close(self, session_id: str) -> bool:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return False
        async with session.lock:
            await asyncio.to_thread(_close_quietly, session.env)
        return True

    def is_open(self, session: Session) -> bool:
        return self.sessions.get(session.id) is session

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


def _close_in_thread(env: Any) -> None:
    threading.Thread(target=_close_quietly, args=(env,), name="agentgym-close-abandoned", daemon=True).start()


def _retrieved(task: asyncio.Future) -> None:
    """Read an abandoned call's outcome, so that its error (the worker was killed) is not reported as unhandled."""
    if not task.cancelled():
        task.exception()
