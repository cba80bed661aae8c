"""Toy envs and a scripted policy (labelled as such) for the collector tests."""

from __future__ import annotations

import threading
from typing import Any

from agentgym.core import AgentEnv


class CountingEnv(AgentEnv):
    """Counts to `goal`: the action 'inc' adds one; anything else is an error observation. Deterministic."""

    system_prompt = "Reply inc."

    def __init__(self, goal: int = 3, max_turns: int = 50):
        super().__init__()
        self.goal, self.max_turns, self.value = goal, max_turns, 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.value = (seed or 0) % 2
        self.task = (options or {}).get("task_id") or "count"
        return f"value {self.value}", {"task_id": self.task}

    def step(self, action: str):
        if action.strip() != "inc":
            return f"value {self.value} (say inc)", 0.0, False, False, {"error_kind": "malformed_action"}
        self.value += 1
        done = self.value >= self.goal
        return f"value {self.value}", float(done), done, False, {}

    def snapshot(self) -> int:
        return self.value

    def restore(self, token: int) -> str:
        self.value = token
        self._last_observation = f"value {self.value}"
        return self._last_observation


class FaultyEnv(CountingEnv):
    """Misbehaves on the task named in `options['task_id']`: raise, hang or garbage at the second step."""

    release = threading.Event()

    def reset(self, *, seed=None, options=None):
        self.mode = (options or {}).get("task_id") or "ok"
        if self.mode == "raise_reset":
            raise RuntimeError("sandbox died")
        return super().reset(seed=seed, options=options)

    def step(self, action: str):
        if self.value >= 1:
            if self.mode == "raise":
                raise ConnectionError("env server gone")
            if self.mode == "hang":
                FaultyEnv.release.wait(30)
            if self.mode == "garbage":
                return "value ?", "lots", False, False, {}
            if self.mode == "short":
                return ("value ?",)
        return super().step(action)


def say_inc(messages):
    """Scripted policy (labelled): always 'inc'."""
    return "inc"
