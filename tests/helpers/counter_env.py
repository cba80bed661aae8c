"""A third-party-style env defined outside agentgym, registered with `agentgym.register`.

Counter-v0: reach a target number by replying "inc" or "dec". Used by the CLI
tests through the ``tests.helpers.counter_env:Counter-v0`` id form.
"""

from __future__ import annotations

import random

import agentgym
from agentgym.toolcalls import error_observation


class CounterEnv(agentgym.AgentEnv):
    system_prompt = "Reply inc or dec to reach the target."

    def __init__(self, max_turns: int = 12):
        super().__init__()
        self.max_turns = max_turns
        self.value = self.target = self.turn = 0

    def task_ids(self):
        return [f"target-{n}" for n in range(1, 6)]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        task = (options or {}).get("task_id") or f"target-{int(self.np_random.integers(1, 6))}"
        self.target, self.value, self.turn = int(task.split("-")[1]), 0, 0
        return f"value {self.value}, target {self.target}", {"task_id": task}

    def step(self, action):
        self.turn += 1
        word = action.strip().lower()
        info = {}
        if word not in ("inc", "dec"):
            info["error_kind"] = "malformed_action"
            obs = error_observation(f"{action[:20]!r} is not inc or dec", hint="reply inc or dec")
        else:
            self.value += 1 if word == "inc" else -1
            obs = f"value {self.value}, target {self.target}"
        done = self.value == self.target
        return obs, float(done), done, (not done and self.turn >= self.max_turns), info

    def solver_action(self):
        return "inc" if self.value < self.target else "dec"


class NoisyCounterEnv(CounterEnv):
    """Nondeterministic on purpose: from the third step on, observations use the global RNG."""

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        if self.turn >= 3:
            obs += f" noise {random.random():.6f}"
        return obs, reward, terminated, truncated, info


def scripted_up_to_target(messages: list[dict]) -> str:
    """A scripted policy (labelled as such): reads the last observation and moves towards the target."""
    text = messages[-1]["content"]
    if not text.startswith("value"):
        return "inc"
    value, target = (int(part.split()[-1]) for part in text.split(",")[:2])
    return "inc" if value < target else "dec"


def scripted_garbage_then_solve(messages: list[dict]) -> str:
    """A scripted policy whose first reply is malformed."""
    if len(messages) <= 2:
        return "<tool_call>{broken"
    return scripted_up_to_target(messages)


agentgym.register("Counter-v0", CounterEnv, description="test env from a separate module")
agentgym.register("NoisyCounter-v0", NoisyCounterEnv)
