"""Stopping the SFT warm start at a success target (`sft_target_success`).

A fixed number of SFT steps leaves one seed's policy anywhere in a wide band of success (on KeyDoor-v0's
medium level, 125 steps gave 0.17-0.78 held-out by seed and machine), and RL from 0.3 and from 0.7 are
different experiments. With a target, every `sft_check_every` steps the policy plays `sft_check_tasks`
training tasks that no demonstration came from (the run's held-out tasks stay unseen), the way held-out
evaluation plays them, and the warm start stops at the first check that reaches the target; `sft_steps` is
the most it may take.
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentgym.trainer.components import build_backend, env_source, eval_collector
from agentgym.trainer.loops import success_rate

from agentgym.errors import ConfigError


def check_tasks(cfg: Any, train_tasks: list[str]) -> list[str]:
    """The training tasks after the demonstrations' (`sft_episodes`), at most `sft_check_tasks` of them."""
    tasks = train_tasks[cfg.sft_episodes:cfg.sft_episodes + cfg.sft_check_tasks]
    if not tasks:
        raise ConfigError(f"sft_target_success checks the warm start on training tasks no demonstration came from, "
                          f"but the {len(train_tasks)} training tasks all go to sft_episodes={cfg.sft_episodes}: "
                          "lower sft_episodes, give the env more training tasks, or drop sft_target_success")
    return tasks


class TargetCheck:
    """Called by `sft` with the steps done: plays the check tasks with the policy's current weights (an
    in-process hf copy, whatever the run's rollout backend, which is not touched) and says whether the target
    is reached. `env`: the run's env source (an env id, or a pool over its env servers or its cluster); None
    makes one (`env_source(cfg)`), as `warm_start_only` and the Ray trainer, whose envs live elsewhere, do."""

    def __init__(self, cfg: Any, p: Any, train_tasks: list[str], env: Any = None):
        self.cfg, self.model, self.prompts = cfg, p.model, p.prompt_tokenizer
        self.tasks = check_tasks(cfg, train_tasks)
        self.backend, self.sync = build_backend(cfg.model_copy(update={"backend": "hf"}), p.model, p.tokenizer)
        self.env = env if env is not None else env_source(cfg)
        self.checks: list[list[float]] = []  #: [steps done, success rate] per check
        self.reached = False

    def __call__(self, steps: int) -> bool:
        self.sync.push(self.model, steps)
        rate, _ = asyncio.run(self.play())
        self.checks.append([steps, rate])
        self.reached = rate >= self.cfg.sft_target_success
        return self.reached

    async def play(self) -> tuple[float, int]:
        collector = eval_collector(self.cfg, self.env, self.backend, self.prompts, f"{self.cfg.name}-sft-check")
        try:
            return await success_rate(collector, self.tasks, self.cfg)
        finally:
            await collector.aclose()
