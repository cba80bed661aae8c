"""Env workers: actors that hold live envs, and the proxy env the collector drives them through.

An `EnvWorker` makes envs with `agentgym.make` and serves `reset`, `step`,
`snapshot` and `restore` on them by handle, many at once (a threaded actor).
Envs run where the collector would run them (`agentgym.runtime.placement`):
one that is not declared ``thread_safe`` gets a worker process of its own.
A `RemoteEnv` is an `AgentEnv` whose calls go to one env of one worker; the
collector cannot tell it from a local env: `areset`/`astep` await the actor
without blocking the event loop, the state fingerprint comes back with every
observation (no extra round trip), and an exception raised by the env is
re-raised by Ray as the same type (a malformed action stays the model's
fault; anything else, including a dead worker, is an infrastructure failure).
`RemoteEnvFactory` is the collector's zero-argument env factory: it spreads
new envs over the workers round-robin.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from dataclasses import dataclass, field
from typing import Any

from agentgym.core import AgentEnv, fingerprint_text


@dataclass(frozen=True)
class EnvInfo:
    """What the collector reads from an env once, when it is made."""

    system_prompt: str = ""
    tools: list[dict[str, Any]] = field(default_factory=list)
    max_turns: int | None = None
    supports_snapshot: bool = False
    deterministic: bool = True


def _fingerprint(env: Any, observation: str) -> str:
    inner = getattr(env, "unwrapped", env)
    return inner.state_fingerprint() if isinstance(inner, AgentEnv) else fingerprint_text(observation)


class EnvWorker:
    """Actor body: live envs of one env id, addressed by integer handles."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], env_runtime: str = "auto"):
        import functools

        from agentgym.registration import make, registry
        from agentgym.runtime.placement import isolated_factory

        self.env_id, self.env_kwargs = env_id, dict(env_kwargs)
        self._spec = registry[env_id]
        # the same placement as the collector's: an env that is not thread_safe gets a worker process of its own
        self._make = isolated_factory(self._spec, self.env_kwargs, env_runtime, call_timeout_s=None) or \
            functools.partial(make, env_id, **self.env_kwargs)
        self._envs: dict[int, Any] = {}
        self._ids = itertools.count()
        self._lock = threading.Lock()

    def open(self) -> tuple[int, EnvInfo]:
        """Make one env; returns its handle and what the collector needs to know about it."""
        env = self._make()
        inner = getattr(env, "unwrapped", env)
        with self._lock:
            handle = next(self._ids)
            self._envs[handle] = env
        info = EnvInfo(system_prompt=getattr(inner, "system_prompt", "") or "",
                       tools=list(inner.tools()) if isinstance(inner, AgentEnv) else [],
                       max_turns=self._spec.max_turns or getattr(inner, "max_turns", None),
                       supports_snapshot=bool(getattr(inner, "supports_snapshot", False)),
                       deterministic=bool(getattr(inner, "deterministic", True)))
        return handle, info

    def reset(self, handle: int, seed: int | None, options: dict[str, Any] | None) -> tuple[str, dict, str]:
        env = self._envs[handle]
        observation, info = env.reset(seed=seed, options=options)
        return observation, info, _fingerprint(env, observation)

    def step(self, handle: int, action: str) -> tuple[str, float, bool, bool, dict, str]:
        env = self._envs[handle]
        observation, reward, terminated, truncated, info = env.step(action)
        return observation, float(reward), bool(terminated), bool(truncated), info, _fingerprint(env, observation)

    def snapshot(self, handle: int) -> Any:
        return getattr(self._envs[handle], "unwrapped", self._envs[handle]).snapshot()

    def restore(self, handle: int, token: Any) -> tuple[str, str]:
        env = self._envs[handle]
        observation = getattr(env, "unwrapped", env).restore(token)
        return observation, _fingerprint(env, observation)

    def close(self, handle: int) -> None:
        with self._lock:
            env = self._envs.pop(handle, None)
        if env is not None:
            env.close()

    def open_envs(self) -> int:
        """How many envs are alive (for tests and meters)."""
        return len(self._envs)


async def await_ref(ref: Any) -> Any:
    """Await a Ray object ref from any event loop."""
    return await asyncio.wrap_future(ref.future())


class RemoteEnv(AgentEnv):
    """One env living in an `EnvWorker`; see the module docstring."""

    def __init__(self, worker: Any, handle: int, info: EnvInfo):
        super().__init__()
        self.worker, self.handle, self.info = worker, handle, info
        self.system_prompt = info.system_prompt
        self.max_turns = info.max_turns
        self.deterministic = info.deterministic  # type: ignore[misc]  (per instance: the remote env's flag)
        self._fingerprint = ""

    def tools(self) -> list[dict[str, Any]]:
        return self.info.tools

    def state_fingerprint(self) -> str:
        return self._fingerprint

    @property
    def supports_snapshot(self) -> bool:
        return self.info.supports_snapshot

    # ---- blocking forms (the collector's worker threads, checkers) ---------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        import ray

        return self._after_reset(ray.get(self.worker.reset.remote(self.handle, seed, options)))

    def step(self, action: str):
        import ray

        return self._after_step(ray.get(self.worker.step.remote(self.handle, action)))

    def snapshot(self) -> Any:
        import ray

        return ray.get(self.worker.snapshot.remote(self.handle))

    def restore(self, token: Any) -> str:
        import ray

        observation, self._fingerprint = ray.get(self.worker.restore.remote(self.handle, token))
        self._last_observation = observation
        return observation

    def close(self) -> None:
        self.worker.close.remote(self.handle)  # fire and forget: nothing waits on a closing env

    # ---- async forms (the collector's event loop) --------------------------------------------
    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        return self._after_reset(await await_ref(self.worker.reset.remote(self.handle, seed, options)))

    async def astep(self, action: str):
        return self._after_step(await await_ref(self.worker.step.remote(self.handle, action)))

    def _after_reset(self, result: tuple[str, dict, str]):
        observation, info, self._fingerprint = result
        self._last_observation = observation
        return observation, info

    def _after_step(self, result: tuple[str, float, bool, bool, dict, str]):
        observation, reward, terminated, truncated, info, self._fingerprint = result
        self._last_observation = observation
        return observation, reward, terminated, truncated, info


class RemoteEnvFactory:
    """The collector's env factory over env workers (round-robin); `env_id` names the env in episodes."""

    def __init__(self, env_id: str, workers: list[Any]):
        if not workers:
            raise ValueError("RemoteEnvFactory needs at least one env worker handle")
        self.env_id, self.workers = env_id, list(workers)
        self._next = itertools.cycle(self.workers)
        self._lock = threading.Lock()

    def __call__(self) -> RemoteEnv:
        import ray

        with self._lock:
            worker = next(self._next)
        handle, info = ray.get(worker.open.remote())
        return RemoteEnv(worker, handle, info)
