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
import copy
from typing import Any

from agentgym.trainer.components import context_settings, env_source, eval_sampling

from agentgym.collector.collector import Collector
from agentgym.collector.config import Task
from agentgym.errors import ConfigError
from agentgym.policy.hf import HFBackend


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
    in-process copy, the run's rollout engine is not touched) and says whether the target is reached."""

    def __init__(self, cfg: Any, p: Any, train_tasks: list[str]):
        self.cfg, self.model = cfg, p.model
        self.tasks = check_tasks(cfg, train_tasks)
        self.prompts = p.prompt_tokenizer
        self.backend = HFBackend(copy.deepcopy(p.model), p.tokenizer, max_batch_size=cfg.concurrency, seed=cfg.seed)
        self.checks: list[list[float]] = []  #: [steps done, success rate] per check
        self.reached = False

    def __call__(self, steps: int) -> bool:
        self.backend.model.load_state_dict(self.model.state_dict())
        self.backend.model.eval()
        rate = asyncio.run(self.play())
        self.checks.append([steps, rate])
        self.reached = rate >= self.cfg.sft_target_success
        return self.reached

    async def play(self) -> float:
        cfg = self.cfg
        collector = Collector(env_source(cfg), self.backend, None, tokenizer=self.prompts, env_kwargs=cfg.env_kwargs,
                              max_turns=cfg.max_turns, concurrency=cfg.concurrency, progress=False,
                              run_id=f"{cfg.name}-sft-check", sampling=eval_sampling(cfg),
                              env_runtime=cfg.env_runtime, turn_timeout_s=cfg.turn_timeout_s,
                              **context_settings(cfg))
        try:
            result = await collector.collect([Task(t, seed=i) for i, t in enumerate(self.tasks)],
                                             group_size=cfg.eval_samples)
        finally:
            await collector.aclose()
        episodes = result.episodes
        return sum(e.total_reward >= cfg.success_reward for e in episodes) / max(1, len(episodes))
