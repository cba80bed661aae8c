"""Maze-v0 episodes played by a tiny model through the HF backend, with an optional context window."""

from __future__ import annotations

import asyncio

from agentgym.collector import Collector, CollectorConfig, Task
from agentgym.collector.window import ContextWindow
from agentgym.policy.base import SamplingParams
from agentgym.policy.hf import HFBackend


def collect_maze(model, tokenizer, window: ContextWindow | None, *, budget: int | None = None, tasks: int = 3,
                 check_template: bool = True) -> list:
    """One sampled episode (at most 6 turns) on each of the first `tasks` open Maze-v0 tasks."""
    backend = HFBackend(model, tokenizer, seed=3)
    config = CollectorConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=4, seed=5), max_turns=6,
                             context_window=window, episode_token_budget=budget, check_template=check_template,
                             progress=False)
    collector = Collector("Maze-v0", backend, None, config=config, env_kwargs={"difficulty": "open"})

    async def go():
        try:
            return (await collector.collect([Task(f"open-{i}", seed=i) for i in range(tasks)])).episodes
        finally:
            await collector.aclose()
            await backend.aclose()

    return asyncio.run(go())
