"""`ProxyEnv`: an `AgentEnv` whose env lives elsewhere (a worker process, an env server, a container).

Subclasses provide one method, `_call(method, *args, **kwargs)`, that runs a
method of the real env and returns its (serialisable) result, raising
`EnvInfraError` when the transport breaks. Everything else is shared:

- what never changes during an env's life (system prompt, tool schemas,
  action format, determinism, task ids, solver and snapshot support, turn
  limit) is read once, from `describe`, when the proxy connects;
- `reset`/`step`/`restore` replies carry the state fingerprint, so
  `state_fingerprint()` costs no round trip;
- the proxy seeds its own ``np_random`` from reset's seed like any Gymnasium
  env (the real env is seeded with the same value on the other side).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

from agentgym.core import Action, AgentEnv, Observation


def describe_env(env: Any) -> dict[str, Any]:
    """What a proxy needs to know about `env` up front (JSON-safe)."""
    inner = getattr(env, "unwrapped", env)
    agent = isinstance(inner, AgentEnv)
    return {
        "class": f"{type(inner).__module__}:{type(inner).__qualname__}",
        "system_prompt": str(getattr(inner, "system_prompt", "") or ""),
        "tools": list(inner.tools()) if agent else [],
        "action_format": str(getattr(inner, "action_format", "tool_calls")),
        "deterministic": bool(getattr(inner, "deterministic", True)),
        "task_ids": [str(t) for t in inner.task_ids()] if agent else [],
        "has_solver": bool(agent and inner.has_solver),
        "supports_snapshot": bool(agent and inner.supports_snapshot),
        "max_turns": getattr(inner, "max_turns", None),
        "render_modes": list(getattr(inner, "metadata", {}).get("render_modes", ["ansi"])),
    }


def fingerprint_of(env: Any) -> str:
    """`env.state_fingerprint()` (empty for non-agentgym envs)."""
    inner = getattr(env, "unwrapped", env)
    return inner.state_fingerprint() if isinstance(inner, AgentEnv) else ""


class ProxyEnv(AgentEnv):
    """An `AgentEnv` that forwards every call to a real env elsewhere; see the module docstring."""

    #: Each proxy talks to its own env: several proxies may be used from several threads.
    thread_safe = True

    def __init__(self, description: dict[str, Any], render_mode: str | None = None):
        self.metadata = {"render_modes": description.get("render_modes") or ["ansi"]}
        super().__init__(render_mode=render_mode)
        self.description = description
        self.system_prompt = description["system_prompt"]
        self.action_format = description["action_format"]  # type: ignore[misc]
        self.deterministic = description["deterministic"]  # type: ignore[misc]
        self.max_turns = description.get("max_turns")
        self._fingerprint = ""

    @abstractmethod
    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """Run `method` on the real env and return its result; `EnvInfraError` when the transport breaks."""

    # ---- the Gymnasium API ---------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        observation, info, self._fingerprint = self._call("reset", seed=seed, options=options)
        return observation, info

    def step(self, action: Action):
        observation, reward, terminated, truncated, info, self._fingerprint = self._call("step", action)
        return observation, reward, terminated, truncated, info

    # ---- agentgym extras ------------------------------------------------------------
    def task_ids(self) -> Sequence[str]:
        return list(self.description["task_ids"])

    def tools(self) -> list[dict[str, Any]]:
        return list(self.description["tools"])

    def state_fingerprint(self) -> str:
        return self._fingerprint

    @property
    def supports_snapshot(self) -> bool:
        return bool(self.description["supports_snapshot"])

    @property
    def has_solver(self) -> bool:
        return bool(self.description["has_solver"])

    def snapshot(self) -> Any:
        if not self.supports_snapshot:
            return super().snapshot()
        return self._call("snapshot")

    def restore(self, token: Any) -> Observation:
        if not self.supports_snapshot:
            return super().restore(token)
        observation, self._fingerprint = self._call("restore", token)
        self._last_observation = observation
        return observation

    def solver_action(self) -> Action:
        if not self.has_solver:
            return super().solver_action()
        return self._call("solver_action")

    def valid_actions(self) -> list[Action] | None:
        return self._call("valid_actions")
