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
import json
import os
import random
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from agentgym.trainer.components import context_settings
from agentgym.trainer.distributed.group import RankGroup
from agentgym.trainer.distributed.shard import idle_sample, split_by_tokens
from agentgym.trainer.distributed.strategy import Strategy
from agentgym.trainer.forward import token_logprobs
from agentgym.trainer.model import trainable_parameters
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
    #: with `sft_target_success`: [step, success] per check, and whether the target stopped the warm start
    checks: list[list[float]] = field(default_factory=list)
    target_reached: bool | None = None


def sft(model: Any, demonstrations: list[Episode], *, steps: int, lr: float, seed: int, packed: bool = True,
        pad_id: int = 0, micro_batch_tokens: int = 8192, strategy: Strategy | None = None,
        batch_episodes: int | None = None, check: Callable[[int], bool] | None = None,
        check_every: int = 0) -> SFTStats:
    """`steps` AdamW steps of mean negative log-likelihood on the demonstrations' action tokens: full-batch, or
    with `batch_episodes` that many demonstrations per step, taken in turn from a fresh seeded permutation each
    epoch (every demonstration once per epoch; the same on every rank).

    Each step accumulates the gradient over micro-batches of at most `micro_batch_tokens` tokens (the same
    gradient as one batch, without materialising one attention mask over every demonstration's tokens).
    With several ranks (`strategy` ddp / fsdp2; every rank calls this with the same demonstrations) each
    step's samples are split over the ranks by tokens, still divided by the step's total action tokens:
    the same steps as one process on the whole batch.

    `check` (one process only), called with the steps done after every `check_every` steps, stops SFT when it
    returns True; the steps it skips are the only difference from a run without it.
    """
    if not demonstrations:
        raise ValueError("no successful solver demonstrations to warm start from; check the env's solver")
    strategy = strategy or Strategy(model, RankGroup())
    group = strategy.group
    rng = random.Random(seed)
    samples = [episode_to_sample(e, [1.0] * e.num_turns) for e in demonstrations]
    full = batch_episodes is None or batch_episodes >= len(samples)
    device = group.device if group.distributed else next(model.parameters()).device
    optimizer = torch.optim.AdamW(trainable_parameters(model), lr=lr)
    model.train()
    losses, queue = [], []
    for _ in range(steps):
        if full:
            rng.shuffle(samples)
            step = samples
        else:
            if len(queue) < batch_episodes:  # a new epoch: what is left of the last one, then a fresh permutation
                queue += rng.sample(samples, len(samples))
            step, queue = queue[:batch_episodes], queue[batch_episodes:]
        trained = sum(s.num_action_tokens for s in step)
        batches = _rank_micro_batches(step, group, micro_batch_tokens, packed=packed, pad_id=pad_id, device=device)
        optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for i, batch in enumerate(batches):
            with strategy.accumulate(sync=i == len(batches) - 1):
                loss = -(token_logprobs(strategy.train_module, batch).logprobs * batch.loss_mask).sum() / trained
                (loss * group.world_size).backward()  # ddp / fsdp2 average gradients over ranks: undo it
            total += float(loss.detach())
        torch.nn.utils.clip_grad_norm_(trainable_parameters(model), 1.0)
        optimizer.step()
        losses.append(group.all_sum([total])[0])
        if check is not None and len(losses) % check_every == 0 and len(losses) < steps and check(len(losses)):
            break
    return SFTStats(len(losses), losses[0] if losses else float("nan"), losses[-1] if losses else float("nan"),
                    len(demonstrations))


def _rank_micro_batches(samples: list[Any], group: RankGroup, micro_batch_tokens: int, *, packed: bool, pad_id: int,
                        device: Any) -> list[Any]:
    """This rank's token share of one step in micro-batches, as many on every rank (idle ones pad: under fsdp2
    every forward is a collective)."""
    mine = split_by_tokens(samples, group.world_size)[group.rank] if group.world_size > 1 else samples
    groups = micro_batches(mine, micro_batch_tokens)
    count = int(group.all_max([float(len(groups))])[0])
    groups += [[idle_sample(samples[0])] for _ in range(count - len(groups))]
    return [collate(g, packed=packed, pad_id=pad_id).to(device) for g in groups]


def sft_policy_side(p: Any, demonstrations: list[Episode], *, steps: int, lr: float, seed: int,
                    micro_batch_tokens: int = 8192, batch_episodes: int | None = None,
                    check: Callable[[int], bool] | None = None, check_every: int = 0) -> SFTStats:
    """SFT of a run's policy (`PolicySide`) on every rank; the KL reference becomes the warm-started policy.

    The leader tells the followers to join with the same demonstrations (they run this on its command);
    `check` (see `sft`) needs one process.
    """
    strategy = p.updater.strategy
    if check is not None and strategy.group.distributed:
        raise ValueError("an SFT target check plays tasks in one process; a distributed strategy takes sft_steps")
    if strategy.group.is_leader:
        strategy.group.lead("sft", {"demonstrations": demonstrations, "steps": steps, "lr": lr, "seed": seed,
                                    "micro_batch_tokens": micro_batch_tokens, "batch_episodes": batch_episodes})
    stats = sft(p.model, demonstrations, steps=steps, lr=lr, seed=seed, packed=p.packed,
                pad_id=p.tokenizer.pad_token_id or 0, micro_batch_tokens=micro_batch_tokens, strategy=strategy,
                batch_episodes=batch_episodes, check=check, check_every=check_every)
    if p.updater.reference is not None:  # same layout as the policy (sharded alike under fsdp2)
        p.updater.reference.load_state_dict(p.model.state_dict())
    return stats


def warm_start(p: Any, env_id: str, env_kwargs: dict[str, Any], tasks: list[str], *, steps: int, lr: float,
               max_turns: int | None, seed: int, context: dict[str, Any] | None = None,
               micro_batch_tokens: int = 8192, batch_episodes: int | None = None,
               check: Callable[[int], bool] | None = None, check_every: int = 0) -> SFTStats:
    """Collect solver demonstrations of `tasks` (rendered with `p.prompt_tokenizer`) and run SFT on `p`'s policy
    (`check`, `check_every`: see `sft`).

    The solver plays with the env's own turn limit; demonstrations longer than `max_turns` (the run's
    limit, which RL and evaluation use) are left out and counted in `SFTStats.too_long`, so the warm start
    never teaches what RL cannot finish. The caller warns about them.
    """
    demos = asyncio.run(collect_demonstrations(env_id, env_kwargs, p.prompt_tokenizer, tasks, max_turns=None,
                                               seed=seed, context=context))
    longest = max((e.num_turns for e in demos), default=0)
    fitting = [e for e in demos if max_turns is None or e.num_turns <= max_turns]
    if demos and not fitting:
        raise ValueError(f"every solver demonstration takes more than max_turns={max_turns} turns (shortest "
                         f"{min(e.num_turns for e in demos)}); raise max_turns or leave it null for the env's limit")
    stats = sft_policy_side(p, fitting, steps=steps, lr=lr, seed=seed, micro_batch_tokens=micro_batch_tokens,
                            batch_episodes=batch_episodes, check=check, check_every=check_every)
    stats.too_long, stats.longest = len(demos) - len(fitting), longest
    return stats


def warm_start_of(cfg: Any, p: Any, train_tasks: list[str], env: Any = None) -> SFTStats:
    """`warm_start` with run `cfg`'s settings: its first `sft_episodes` training tasks, its turn limit and context,
    and with `sft_target_success` a `TargetCheck` on the training tasks after those (and a last check at the end,
    so the stats say where a warm start that never reached the target stopped), played on `env`, the run's env
    source when it has one; the stats go to ``sft.json``."""
    from agentgym.trainer.sft_target import TargetCheck

    target = TargetCheck(cfg, p, train_tasks, env) if cfg.sft_target_success is not None else None
    stats = warm_start(p, cfg.env, cfg.env_kwargs, train_tasks[:cfg.sft_episodes], steps=cfg.sft_steps,
                       lr=cfg.sft_lr, max_turns=cfg.max_turns, seed=cfg.seed, context=context_settings(cfg),
                       micro_batch_tokens=cfg.micro_batch_tokens, batch_episodes=cfg.sft_batch_episodes,
                       check=target, check_every=cfg.sft_check_every)
    if target is not None:
        if not target.reached:
            target(stats.steps)
        stats.checks, stats.target_reached = target.checks, target.reached
    (cfg.run_dir / "sft.json").write_text(json.dumps(asdict(stats)))
    return stats


def start_fresh(cfg: Any, c: Any, log: Any) -> None:
    """A new run's first steps, local or on Ray: its run_config.json, then the SFT warm start of `c`'s policy on its
    training tasks when configured (its success checks play on `c.env`, the run's own env source where the run has
    one in this process: with env_cluster a second cluster would start containers beside the run's).

    The warm start uses the run's turn limit (longer demonstrations are left out, with a warning), is saved as
    ``checkpoints/sft/policy``, and becomes the KL reference.
    """
    (cfg.run_dir / RUN_CONFIG).write_text(cfg.model_dump_json(indent=2))
    if not cfg.sft_steps:
        return
    p = c.policy
    sft = warm_start_of(cfg, p, c.train_tasks, c.env)
    log.console.print(f"SFT warm start: {sft.steps} steps on {sft.demonstrations} solver demonstrations, "
                      f"NLL {sft.first_loss:.3f} -> {sft.last_loss:.3f}")
    if sft.checks:
        steps, rate = sft.checks[-1]
        shown = ", ".join(f"{r:.2f} at {int(n)}" for n, r in sft.checks)
        if sft.target_reached:
            log.console.print(f"SFT target {cfg.sft_target_success} reached after {int(steps)} steps ({shown})")
        else:
            log.console.print(f"[yellow]warning[/]: the warm start ended at sft_steps={cfg.sft_steps} with success "
                              f"{rate:.2f}, below sft_target_success={cfg.sft_target_success} ({shown}); RL starts "
                              "from there: raise sft_steps, or lower the target")
    save_sft_policy(cfg.run_dir, p.model, p.tokenizer, p.updater.strategy)
    if sft.too_long:
        log.console.print(f"[yellow]warning[/]: {sft.too_long} solver demonstrations need more than "
                          f"max_turns={cfg.max_turns} turns (longest {sft.longest}); they were left out of "
                          "the warm start, and RL cannot finish such tasks: raise max_turns, or leave it "
                          "null to use the env's own limit")


def save_sft_policy(run_dir: Path, model: Any, tokenizer: Any, strategy: Strategy | None = None) -> Path:
    """The model right after the SFT warm start, as ``checkpoints/sft/policy`` (``hf:RUN@sft``); leader only
    (under fsdp2 the followers join the gather of the full weights)."""
    final = run_dir / "checkpoints" / "sft"
    tmp = final.with_name(f".tmp-sft-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    if strategy is not None and strategy.needs_gather:
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        base.save_pretrained(tmp / "policy", state_dict=strategy.gathered_state_dict())
    else:
        model.save_pretrained(tmp / "policy")
    tokenizer.save_pretrained(tmp / "policy")
    shutil.rmtree(final, ignore_errors=True)
    os.replace(tmp, final)
    return final


def warm_start_only(cfg: Any) -> Path:
    """Only the warm start of run `cfg` (its model built and seeded as `train` builds it, its SFT on the same
    demonstrations), saved as ``checkpoints/sft/policy``; returns that directory. A run started with
    ``model: <that directory>, sft_steps: 0`` begins RL from the same policy, so runs that differ only after
    the warm start (bench/learning.py: every estimator of one seed) pay for it once and start alike."""
    from agentgym.trainer.components import build_policy_side, split_tasks
    from agentgym.trainer.loops import seed_everything

    from agentgym.env_facts import resolve_run_env

    if not cfg.sft_steps:
        raise ValueError(f"run {cfg.name} has no warm start (sft_steps: 0)")
    cfg, facts = resolve_run_env(cfg)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    seed_everything(cfg.seed)
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    p = build_policy_side(cfg)
    train_tasks, _ = split_tasks(cfg, facts)
    warm_start_of(cfg, p, train_tasks)
    return save_sft_policy(cfg.run_dir, p.model, p.tokenizer, p.updater.strategy) / "policy"
