"""A third-party-style env for the bring-your-own-env tests (the shape of docs/train-your-own-env.md).

Walk-v0: reach the goal on a line of cells by replying "left" or "right". It defines its own task
splits (`task_ids(split=None)`), registers its own turn limit (12, not the trainer's), offers
`valid_actions()` and a solver for the SFT warm start. Importing the module registers it, so
``tests.helpers.grid_env:Walk-v0`` works wherever an env id is taken.
"""

from __future__ import annotations

import agentgym
from agentgym.toolcalls import error_observation

TASKS = [f"walk-{start}-{goal}" for start in range(7) for goal in range(7) if abs(start - goal) >= 2]


class WalkEnv(agentgym.AgentEnv):
    system_prompt = "You stand on a line of 7 cells. Reply left or right to reach the goal."

    def __init__(self, width: int = 7):
        super().__init__()
        self.width, self.pos, self.goal = width, 0, 0

    def task_ids(self, split=None):
        parts = {"train": TASKS[:20], "eval": TASKS[20:26], "test": TASKS[26:]}
        return list(TASKS) if split is None else parts[split]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        task = self.choose_task(options, TASKS)
        self.pos, self.goal = (int(x) for x in task.split("-")[1:])
        return self._describe(), {"task_id": task}

    def _describe(self):
        side = "right" if self.goal > self.pos else "left"
        return f"The goal is {abs(self.goal - self.pos)} cells to the {side}."

    def step(self, action):
        word = action.strip().lower()
        if word not in ("left", "right"):
            return error_observation(f"{action[:20]!r} is not a move", hint="reply left or right"), 0.0, \
                False, False, {"error_kind": "malformed_action"}
        self.pos = min(self.width - 1, max(0, self.pos + (1 if word == "right" else -1)))
        done = self.pos == self.goal
        return ("You reached the goal." if done else self._describe()), float(done), done, False, {}

    def valid_actions(self):
        return ["left", "right"]

    def solver_action(self):
        return "right" if self.goal > self.pos else "left"


agentgym.register("Walk-v0", WalkEnv, max_turns=12, description="Walk a line to the goal (test env).")
