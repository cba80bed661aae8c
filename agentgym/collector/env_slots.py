"""The collector's envs: made on demand, kept for the next episode when one ends cleanly, closed when it did not.

Against an env pool (`agentgym.runtime.cluster.EnvPool`: replicas with session limits) the collector asks for a new
env only while the pool has a session free *now*: free on a replica still alive, and not already promised to an env
being made. A server that answers 'busy' anyway before an episode began (a replica killed since the last look,
another client holding sessions, a close still on its way) makes the episode wait and try again, bounded by
`env_start_timeout_s`; it does not end the episode. Without that, a killed replica turned every later episode into
an instant 'every replica is at its session limit' failure until the cluster replaced it.

Envs that are given up (an episode that ended in an error) are closed on threads of their own, so a close never
queues behind hung env calls while the pool still counts its session.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import time
from collections.abc import Callable
from typing import Any

from agentgym.collector.faults import EpisodeFault, bounded, describe
from agentgym.errors import EnvInfraError

log = logging.getLogger("agentgym.collector")
BUSY = "busy"  #: the `EnvInfraError.kind` of a server (or pool) with no session free
_POLL_S = 0.02
_RETRY_S = 0.25


class EnvSlots:
    """The envs one collector holds: `idle` ones, and how many are `live` (made and not yet closed)."""

    def __init__(self, env_id: str, factory: Callable[[], Any], executor: concurrent.futures.Executor,
                 start_timeout_s: float | None, progress: Callable[[], int], close_threads: int):
        self.env_id, self._factory, self._executor = env_id, factory, executor
        self._start_timeout_s = start_timeout_s
        self._progress = progress  #: something that grows while episodes move (the turns taken)
        self.idle: list[Any] = []
        self.live = 0  #: envs made and not yet closed (idle, in use, or held by a paused episode)
        self._making = 0  #: envs being made (their session may not be counted by the pool yet)
        self._closer = concurrent.futures.ThreadPoolExecutor(max_workers=max(2, close_threads),
                                                             thread_name_prefix="agentgym-env-close")
        self._capacity_warned = False

    async def acquire(self) -> Any:
        """An idle env, or a new one once a session is free; a 'busy' answer while making it means wait and retry."""
        busy_since = None
        while True:
            await self._wait_for_session()
            if self.idle:
                return self.idle.pop()
            self.live += 1
            self._making += 1
            making = self._executor.submit(self._factory)
            try:
                return await bounded("env construction", asyncio.wrap_future(making), self._start_timeout_s)
            except BaseException as exc:
                self.live -= 1
                failure = exc
            finally:
                self._making -= 1
            if isinstance(failure, EnvInfraError):
                if failure.kind != BUSY:
                    raise EpisodeFault(f"making the env: {failure.reason}", infra_kind=failure.kind) from failure
                busy_since = await self.wait_after_busy(busy_since, failure.reason)
            elif isinstance(failure, EpisodeFault) or not isinstance(failure, Exception):  # a timeout, a cancel:
                making.add_done_callback(_close_when_made)  # the env may still come, a worker nobody would close
                raise failure
            else:
                raise EpisodeFault(f"making the env raised {describe(failure)}") from failure

    async def wait_after_busy(self, since: float | None, reason: str) -> float:
        """Pause before asking again after a 'busy' answer; an episode error once `env_start_timeout_s` has passed
        since the first one. Returns when the first one came (pass it back on the next call)."""
        now = time.monotonic()
        since = now if since is None else since
        bound = self._start_timeout_s
        if bound is not None and now - since > bound:
            raise EpisodeFault(f"no env session of {self.env_id} came free in {bound:g}s (the last answer: {reason}); "
                               "start more env replicas, raise their session limit or lower the concurrency",
                               infra_kind=BUSY)
        await asyncio.sleep(_RETRY_S)
        return since

    def keep(self, env: Any) -> None:
        """An env whose episode ended cleanly: the next episode resets it."""
        self.idle.append(env)

    def drop(self, env: Any) -> None:
        """Close an env that is not to be reused, without waiting for it (on a close thread)."""
        self.live -= 1
        self._closer.submit(_close_quietly, env)

    async def close(self, env: Any) -> None:
        """Close an env and wait until it is closed (its session is back with the factory)."""
        self.live -= 1
        await asyncio.get_running_loop().run_in_executor(self._closer, _close_quietly, env)

    async def aclose(self) -> None:
        """Close the idle envs; closes already on their way still run (never cancelled: a cancelled close would
        leave a worker process or a server session to the reapers)."""
        envs, self.idle = self.idle, []
        for env in envs:
            await self.close(env)
        self._closer.shutdown(wait=False)

    async def _wait_for_session(self) -> None:
        """Wait while no session is free (an env pool's replicas x session limit, minus those in use or being made).

        An episode waits for an env to come back rather than asking a full pool for one more session. The wait
        ends with an infra failure only when nothing moves (no turn taken, no env given back or made, no session
        freed) for `env_start_timeout_s`.
        """
        if self._has_room():
            return
        if not self._capacity_warned:
            self._capacity_warned = True
            log.warning("%s: all %s env sessions are in use; episodes wait for one (start more env replicas or raise "
                        "their session limit for more concurrency)", self.env_id, _capacity(self._factory))
        bound = self._start_timeout_s
        progress, since = self._snapshot(), time.monotonic()
        while not self._has_room():
            await asyncio.sleep(_POLL_S)
            if (now := self._snapshot()) != progress:
                progress, since = now, time.monotonic()
            elif bound is not None and time.monotonic() - since > bound:
                raise EpisodeFault(f"no env session of {self.env_id} came free in {bound:g}s: all "
                                   f"{_capacity(self._factory)} are in use and no episode moved; start more env "
                                   "replicas or lower the concurrency", infra_kind="env_capacity")

    def _has_room(self) -> bool:
        if self.idle:
            return True
        capacity = _capacity(self._factory)
        if capacity is not None and self.live >= capacity:
            return False
        free = _free(self._factory)
        return free is None or free > self._making

    def _snapshot(self) -> tuple[Any, ...]:
        return self._progress(), self.live, self._making, _free(self._factory)


def _capacity(factory: Any) -> int | None:
    """How many envs `factory` can have open at once (an `EnvPool` knows; None: no limit known)."""
    capacity = getattr(factory, "capacity", None)
    return capacity() if callable(capacity) else None


def _free(factory: Any) -> int | None:
    """How many more envs `factory` can open now (an `EnvPool` knows; None: no limit known)."""
    free = getattr(factory, "free", None)
    return free() if callable(free) else None


def _close_when_made(making: concurrent.futures.Future) -> None:
    """Close an env whose construction finished after its episode gave up on it (a timeout, a cancellation)."""
    if not making.cancelled() and making.exception() is None:
        _close_quietly(making.result())


def _close_quietly(env: Any) -> None:
    try:
        env.close()
    except Exception:
        log.debug("closing an env failed", exc_info=True)
