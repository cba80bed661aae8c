"""Supervised warm start on the env's solver demonstrations (behaviour cloning on action tokens only).

A randomly initialised model never emits a valid move, so RL gets no signal
(the prototype in issue 6 showed it). A few steps on solver demonstrations
teach the format and a little of the task. The demonstrations are collected
by the real collector with the solver as a scripted policy (labelled
``scripted``) and the policy's own tokenizer, so their token layout is exactly
what the model will see during RL.
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from agentgym.trainer.components import context_settings
from agentgym.trainer.forward import token_logprobs
from agentgym.trainer.packing import collate, episode_to_sample, micro_batches

from agentgym.collector.collector import Collector
from agentgym.collector.config import Task
from agentgym.policy.checkpoints import RUN_CONFIG
from agentgym.policy.scripted import ScriptedBackend
from agentgym.trajectory import Episode


def solver_action(messages: list[dict[str, str]], env: Any) -> str:
    """The env's built-in optimal action (a scripted policy)."""
    return env.unwrapped.solver_action()


async def collect_demonstrations(env_id: str, env_kwargs: dict[str, Any], tokenizer: Any, tasks: list[str],
                                 *, max_turns: int | None, seed: int,
                                 context: dict[str, Any] | None = None) -> list[Episode]:
    """One solver episode per task, recorded token by token (successful ones are returned).

    `context`: the run's context-window settings (`context_settings`), so that a demonstration's prompts are
    cut exactly as the policy's will be in RL and evaluation."""
    collector = Collector(env_id, ScriptedBackend(solver_action, tokenizer), env_kwargs=env_kwargs,
                          max_turns=max_turns, concurrency=len(tasks), progress=False, **(context or {}))
    try:
        result = await collector.collect([Task(t, seed=seed + i) for i, t in enumerate(tasks)], group_size=1)
    finally:
        await collector.aclose()
    return [e for e in result.episodes if e.total_reward > 0]


@dataclass
class SFTStats:
    steps: int
    first_loss: float
    last_loss: float
    demonstrations: int
    too_long: int = 0  #: successful demonstrations longer than the run's turn limit (left out of SFT)
    longest: int = 0  #: turns of the longest successful demonstration


def sft(model: Any, demonstrations: list[Episode], *, steps: int, lr: float, seed: int, packed: bool = True,
        pad_id: int = 0, micro_batch_tokens: int = 8192) -> SFTStats:
    """`steps` full-batch AdamW steps of mean negative log-likelihood on the demonstrations' action tokens.

    Each step accumulates the gradient over micro-batches of at most `micro_batch_tokens` tokens (the same
    gradient as one batch, without materialising one attention mask over every demonstration's tokens)."""
    if not demonstrations:
        raise ValueError("no successful solver demonstrations to warm start from; check the env's solver")
    rng = random.Random(seed)
    samples = [episode_to_sample(e, [1.0] * e.num_turns) for e in demonstrations]
    trained = sum(s.num_action_tokens for s in samples)
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    losses = []
    for _ in range(steps):
        rng.shuffle(samples)
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for group in micro_batches(samples, micro_batch_tokens):
            batch = collate(group, packed=packed, pad_id=pad_id).to(device)
            loss = -(token_logprobs(model, batch).logprobs * batch.loss_mask).sum() / trained
            loss.backward()
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(total)
    return SFTStats(steps, losses[0] if losses else float("nan"), losses[-1] if losses else float("nan"),
                    len(demonstrations))


def warm_start(model: Any, tokenizer: Any, env_id: str, env_kwargs: dict[str, Any], tasks: list[str], *,
               steps: int, lr: float, max_turns: int | None, seed: int, packed: bool = True,
               context: dict[str, Any] | None = None, micro_batch_tokens: int = 8192) -> SFTStats:
    """Collect solver demonstrations of `tasks` (rendered with `tokenizer`) and run `sft` on them.

    The solver plays with the env's own turn limit; demonstrations longer than `max_turns` (the run's
    limit, which RL and evaluation use) are left out and counted in `SFTStats.too_long`, so the warm start
    never teaches what RL cannot finish. The caller warns about them.
    """
    demos = asyncio.run(collect_demonstrations(env_id, env_kwargs, tokenizer, tasks, max_turns=None, seed=seed,
                                               context=context))
    longest = max((e.num_turns for e in demos), default=0)
    fitting = [e for e in demos if max_turns is None or e.num_turns <= max_turns]
    if demos and not fitting:
        raise ValueError(f"every solver demonstration takes more than max_turns={max_turns} turns (shortest "
                         f"{min(e.num_turns for e in demos)}); raise max_turns or leave it null for the env's limit")
    stats = sft(model, fitting, steps=steps, lr=lr, seed=seed, packed=packed, pad_id=tokenizer.pad_token_id or 0,
                micro_batch_tokens=micro_batch_tokens)
    stats.too_long, stats.longest = len(demos) - len(fitting), longest
    return stats


def start_fresh(cfg: Any, p: Any, train_tasks: list[str], log: Any) -> None:
    """A new run's first steps, local or on Ray: its run_config.json, then the SFT warm start when configured.

    The warm start uses the run's turn limit (longer demonstrations are left out, with a warning), is saved as
    ``checkpoints/sft/policy``, and becomes the KL reference.
    """
    (cfg.run_dir / RUN_CONFIG).write_text(cfg.model_dump_json(indent=2))
    if not cfg.sft_steps:
        return
    sft = warm_start(p.model, p.prompt_tokenizer, cfg.env, cfg.env_kwargs, train_tasks[:cfg.sft_episodes],
                     steps=cfg.sft_steps, lr=cfg.sft_lr, max_turns=cfg.max_turns, seed=cfg.seed, packed=p.packed,
                     context=context_settings(cfg), micro_batch_tokens=cfg.micro_batch_tokens)
    log.console.print(f"SFT warm start: {sft.steps} steps on {sft.demonstrations} solver demonstrations, "
                      f"NLL {sft.first_loss:.3f} -> {sft.last_loss:.3f}")
    save_sft_policy(cfg.run_dir, p.model, p.tokenizer)
    if sft.too_long:
        log.console.print(f"[yellow]warning[/]: {sft.too_long} solver demonstrations need more than "
                          f"max_turns={cfg.max_turns} turns (longest {sft.longest}); they were left out of "
                          "the warm start, and RL cannot finish such tasks: raise max_turns, or leave it "
                          "null to use the env's own limit")
    if p.updater.reference is not None:  # the reference is the policy after the warm start
        p.updater.reference.load_state_dict(p.model.state_dict())


def save_sft_policy(run_dir: Path, model: Any, tokenizer: Any) -> Path:
    """The model right after the SFT warm start, as ``checkpoints/sft/policy`` (``hf:RUN@sft``)."""
    final = run_dir / "checkpoints" / "sft"
    tmp = final.with_name(f".tmp-sft-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp / "policy")
    tokenizer.save_pretrained(tmp / "policy")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final
