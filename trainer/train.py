"""The training loop, top to bottom: `train(cfg)` is what `agentgym train CONFIG` runs.

    build      policy (+ critic, + reference), rollout backend, collector, data manager, run log
    resume     model, optimizer, scheduler, RNG, data cursor and policy version from the latest checkpoint
    warm start a few SFT steps on solver demonstrations (fresh runs only, when configured)
    loop       `trainer.loops`: sync (collect a batch -> update -> push weights) or async (the
               collector on the event loop, the trainer on a thread; they meet only in the data manager);
               each update writes a metrics row (jsonl, TensorBoard, store, table) and checkpoints when due
"""

from __future__ import annotations

import asyncio

import torch
from agentgym.trainer.components import build_components
from agentgym.trainer.distributed.checkpoint import checkpoint_manager
from agentgym.trainer.distributed.group import launched_world
from agentgym.trainer.loops import RunResult, async_loop, restore_extra, seed_everything, sync_loop
from agentgym.trainer.parts import Components
from agentgym.trainer.run_log import RunLog
from agentgym.trainer.sft import start_fresh
from rich.console import Console

from agentgym.config import TrainConfig
from agentgym.data import Cursor
from agentgym.env_facts import EnvFacts, resolve_run_env
from agentgym.store import IN_FLIGHT_AT_END, IN_FLIGHT_AT_RESUME, TrajectoryStore


def train(cfg: TrainConfig, *, resume: bool = False, console: Console | None = None,
          facts: EnvFacts | None = None) -> RunResult:
    """Run `cfg` to the end (or to its time limit); with `resume`, continue from the latest checkpoint.

    The env is made once first (`resolve_run_env`; `facts` when the caller already did), so a bad env id or
    bad env arguments stop the run before any model is built. The progress table goes to `console`.
    """
    if facts is None:
        cfg, facts = resolve_run_env(cfg)
    if cfg.torch_threads:
        torch.set_num_threads(cfg.torch_threads)
    seed_everything(cfg.seed)
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    if cfg.runtime == "ray":
        from agentgym.trainer.ray_runtime import run_ray

        return run_ray(cfg, resume=resume)
    launched = launched_world()
    if cfg.strategy != "single" and launched is not None and launched[0] != 0:
        from agentgym.trainer.distributed.follower import follow

        done = follow(cfg)  # a follower rank: the leader's commands until it stops
        return RunResult(done, done, [], "leader")
    store = TrajectoryStore(cfg.store_url)
    c = build_components(cfg, store, facts)
    try:
        return _run(cfg, c, store, facts, resume, console)
    finally:
        group = c.policy.updater.strategy.group
        if group.distributed:
            group.release()


def _run(cfg: TrainConfig, c: Components, store: TrajectoryStore, facts: EnvFacts, resume: bool,
         console: Console | None) -> RunResult:
    ckpt = checkpoint_manager(cfg, c)
    start, version = 0, 0
    latest = ckpt.latest() if resume else None
    log = RunLog(cfg.run_dir, run_id=cfg.name, store=store, tensorboard=cfg.tensorboard, plot=cfg.plot,
                 resume=latest is not None, console=console)
    p = c.policy
    if p.memory is not None:
        log.console.print(p.memory.table(), highlight=False)
    if latest is not None:
        state = ckpt.load(latest, model=p.model, optimizer=p.optimizer, scheduler=p.scheduler, critic=p.critic)
        start, version = state.update, state.policy_version
        p.updater.updates_done = start
        restore_extra(c, state.extra)
        store.end_in_flight(cfg.name, IN_FLIGHT_AT_RESUME)
        c.dm.restore(Cursor.from_dict(state.cursor), store.iter_episodes(run_id=cfg.name))
        log.truncate_after(start)
        log.console.print(f"[bold]resumed[/] {cfg.name} from {latest.name}: update {start}, policy version {version}")
    else:
        store.log_run(cfg.name, {**cfg.model_dump(), "env_id": facts.env_id, "env_turn_limit": facts.turn_limit,
                                 "split_sizes": {k: len(v) for k, v in facts.splits.items()},
                                 "train_task_count": len(c.train_tasks), "held_out_tasks": c.eval_tasks})
        start_fresh(cfg, c, log)
    loop = sync_loop if cfg.mode == "sync" else async_loop

    async def run_then_close() -> RunResult:
        try:
            return await loop(cfg, c, log, ckpt, start, version)
        finally:  # on the run's own event loop: an HTTP backend's pooled connections belong to it
            await c.aclose()

    try:
        result = asyncio.run(run_then_close())
    finally:
        log.close()
    store.end_in_flight(cfg.name, IN_FLIGHT_AT_END)  # the episodes the stopped collection abandoned
    return result
