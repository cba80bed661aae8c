"""Run one proxied call on a real env: the far side of `ProxyEnv`, shared by worker processes and the env server."""

from __future__ import annotations

from typing import Any

from agentgym.runtime.proxy import fingerprint_of

#: methods a proxy may call; anything else is refused
METHODS = ("reset", "step", "snapshot", "restore", "solver_action", "valid_actions")


def dispatch(env: Any, method: str, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None) -> Any:
    """`method(*args, **kwargs)` on `env`, its reply in the shape `ProxyEnv` expects (fingerprints attached)."""
    kwargs = kwargs or {}
    inner = getattr(env, "unwrapped", env)
    if method == "reset":
        observation, info = env.reset(**kwargs)
        return observation, dict(info), fingerprint_of(env)
    if method == "step":
        observation, reward, terminated, truncated, info = env.step(*args, **kwargs)
        return observation, float(reward), bool(terminated), bool(truncated), dict(info), fingerprint_of(env)
    if method == "restore":
        observation = inner.restore(*args, **kwargs)
        return observation, fingerprint_of(env)
    if method in METHODS:
        return getattr(inner, method)(*args, **kwargs)
    raise ValueError(f"unknown env method {method!r}; one of {', '.join(METHODS)}")
