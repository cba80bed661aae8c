"""The sandbox pools Code-v0 episodes draw from, shared by every env instance of a process.

Two pools per (image, limits, backend): one for the agents' workspaces and one
for grading, so that episodes holding every workspace sandbox can still be
graded. A sandbox that cannot be had (no engine, no image, the pool exhausted
for too long) is the infrastructure's fault and raises `EnvInfraError`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from dataclasses import dataclass

from agentgym.sandboxes import Limits, Pool, Sandbox

from agentgym import sandboxes
from agentgym.errors import EnvInfraError


@dataclass(frozen=True)
class PoolKey:
    image: str
    limits: Limits
    backend: str
    role: str
    """``workspace`` or ``grader``."""


_POOLS: dict[PoolKey, Pool] = {}
_LEASED: Counter[PoolKey] = Counter()
_LOCK = threading.Lock()
#: How long `acquire` waits for a released sandbox to finish its reset before starting a new container
#: (a reset takes milliseconds, a container start hundreds of them).
RESET_WAIT_S = 0.5


def shared_pool(key: PoolKey, size: int) -> Pool:
    """The process's pool for `key`, made on first use (it starts sandboxes only when asked for them)."""
    with _LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = Pool(key.image, size, limits=key.limits, backend=key.backend, warm=False)  # type: ignore[arg-type]
            _POOLS[key] = pool
        elif pool.size < size:
            pool.size = size
        return pool


def acquire(key: PoolKey, size: int, timeout_s: float) -> Sandbox:
    """A clean sandbox of the pool for `key`, or `EnvInfraError` saying why there is none."""
    pool = shared_pool(key, size)
    deadline = time.monotonic() + RESET_WAIT_S
    while pool.idle == 0 and pool.live > _LEASED[key] and time.monotonic() < deadline:
        time.sleep(0.001)  # a released sandbox is being reset: it is ready sooner than a new container
    try:
        sandbox = pool.acquire(timeout=timeout_s)
    except TimeoutError as exc:
        raise EnvInfraError(f"no {key.role} sandbox of {key.image} became free within {timeout_s:g}s "
                            f"(pool size {size}); raise pool_size or lower the number of parallel episodes",
                            kind="sandbox_pool_exhausted") from exc
    except sandboxes.SandboxError as exc:
        raise EnvInfraError(f"could not start a {key.role} sandbox of {key.image}: {exc}",
                            kind="sandbox_unavailable") from exc
    with _LOCK:
        _LEASED[key] += 1
    return sandbox


def release(key: PoolKey, sandbox: Sandbox) -> None:
    """Give a sandbox back to its pool (reset, or replaced when it died), or close it when the pool is gone."""
    pool = _POOLS.get(key)
    with _LOCK:
        _LEASED[key] = max(0, _LEASED[key] - 1)
    try:
        if pool is None:
            sandbox.close()
        else:
            pool.release(sandbox)
    except (ValueError, sandboxes.SandboxError):
        sandbox.close()


def warm(key: PoolKey, size: int) -> None:
    """Start the pool's sandboxes now rather than on the first episodes."""
    shared_pool(key, size).fill()


def close_all() -> None:
    """Stop every pooled sandbox of this process (at exit the sandbox layer removes them anyway)."""
    with _LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
        _LEASED.clear()
    for pool in pools:
        pool.close()

