"""Helpers of the Code-v0 tests: the repo task fixture and playing an episode."""

from __future__ import annotations

from pathlib import Path

REPO_TASKS = Path(__file__).resolve().parents[1] / "envs" / "code" / "repo_tasks"


def play(env, actions: list[str]) -> list[tuple]:
    """Step `actions` in order until the episode ends; every step's result."""
    out = []
    for action in actions:
        out.append(env.step(action))
        if out[-1][2] or out[-1][3]:
            break
    return out


def solve(env, task_id: str, seed: int = 0) -> tuple[float, dict]:
    """Play the built-in solver on one task; (reward, last info)."""
    env.reset(seed=seed, options={"task_id": task_id})
    for _ in range(10):
        _, reward, terminated, truncated, info = env.step(env.unwrapped.solver_action())
        if terminated or truncated:
            return float(reward), info
    raise AssertionError(f"the solver did not finish task {task_id}")
