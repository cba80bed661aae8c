"""The training loop, top to bottom: `train(cfg)` is what `agentgym train CONFIG` runs.

    build      policy (+ critic, + reference), rollout backend, collector, data manager, run log
    resume     model, optimizer, scheduler, RNG, data cursor and policy version from the latest checkpoint
    warm start a few SFT steps on solver demonstrations (fresh runs only, when configured)
    loop       sync:  collect a batch -> update -> push weights
               async: the collector runs on the event loop, the trainer on a thread; they meet
                      only in the data manager
    each update: metrics row (jsonl, TensorBoard, store, table), checkpoint every N updates
"""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from agentgym.trainer.checkpoint import CheckpointManager, TrainerState
from agentgym.trainer.components import Components, build_components, evaluate
from agentgym.trainer.run_log import RunLog
from agentgym.trainer.sft import warm_start
from agentgym.trainer.signal_watch import SignalWatch
from rich.console import Console

from agentgym.config import TrainConfig
from agentgym.credit.record import dropped_records, records_from_result
from agentgym.data import Cursor
from agentgym.env_facts import EnvFacts, resolve_run_env
from agentgym.policy.checkpoints import RUN_CONFIG
from agentgym.store import TrajectoryStore


@dataclass
class RunResult:
    """How a run ended."""

    updates: int
    policy_version: int
    rows: list[dict[str, float]]
    stopped_by: str  #: "updates" | "time_limit" | "no_signal"


def wilson_interval(rate: float, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a success rate measured on `n` episodes (a 64-task estimate is about +-0.12)."""
    if n <= 0:
        return float("nan"), float("nan")
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * ((rate * (1 - rate) / n + z * z / (4 * n * n)) ** 0.5) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


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
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    store = TrajectoryStore(cfg.store_url)
    c = build_components(cfg, store, facts)
    ckpt = CheckpointManager(cfg.run_dir, keep=cfg.keep_checkpoints)
    start, version = 0, 0
    latest = ckpt.latest() if resume else None
    log = RunLog(cfg.run_dir, run_id=cfg.name, store=store, tensorboard=cfg.tensorboard, plot=cfg.plot,
                 resume=latest is not None, console=console)
    if latest is not None:
        state = ckpt.load(latest, model=c.model, optimizer=c.optimizer, scheduler=c.scheduler, critic=c.critic)
        start, version = state.update, state.policy_version
        c.updater.updates_done = start
        restore_extra(c, state.extra)
        c.dm.restore(Cursor.from_dict(state.cursor), store.iter_episodes(run_id=cfg.name))
        log.truncate_after(start)
        log.console.print(f"[bold]resumed[/] {cfg.name} from {latest.name}: update {start}, policy version {version}")
    else:
        (cfg.run_dir / RUN_CONFIG).write_text(cfg.model_dump_json(indent=2))
        store.log_run(cfg.name, {**cfg.model_dump(), "env_id": facts.env_id, "env_turn_limit": facts.turn_limit,
                                 "split_sizes": {k: len(v) for k, v in facts.splits.items()},
                                 "train_task_count": len(c.train_tasks), "held_out_tasks": c.eval_tasks})
        if cfg.sft_steps:
            sft = warm_start(c.model, c.prompt_tokenizer, cfg.env, cfg.env_kwargs, c.train_tasks[:cfg.sft_episodes],
                             steps=cfg.sft_steps, lr=cfg.sft_lr, max_turns=cfg.max_turns, seed=cfg.seed,
                             packed=c.packed)
            log.console.print(f"SFT warm start: {sft.steps} steps on {sft.demonstrations} solver demonstrations, "
                              f"NLL {sft.first_loss:.3f} -> {sft.last_loss:.3f}")
            save_sft_policy(cfg.run_dir, c.model, c.tokenizer)
            if sft.too_long:
                log.console.print(f"[yellow]warning[/]: {sft.too_long} solver demonstrations need more than "
                                  f"max_turns={cfg.max_turns} turns (longest {sft.longest}); they were left out of "
                                  "the warm start, and RL cannot finish such tasks: raise max_turns, or leave it "
                                  "null to use the env's own limit")
        if c.updater.reference is not None:
            c.updater.reference.load_state_dict(c.model.state_dict())
    loop = _sync_loop if cfg.mode == "sync" else _async_loop
    try:
        result = asyncio.run(loop(cfg, c, log, ckpt, start, version))
    finally:
        log.close()
        asyncio.run(c.aclose())
    return result


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


def restore_extra(c: Components, extra: dict[str, Any]) -> None:
    """Learned credit models and the TRACE allocator from a checkpoint's extra state."""
    if c.updater.credit_models is not None and extra.get("credit_models") is not None:
        c.updater.credit_models.load_state_dict(extra["credit_models"])
    if getattr(c.driver, "allocator", None) is not None and extra.get("trace_allocator") is not None:
        c.driver.allocator.load_state_dict(extra["trace_allocator"])


def _allocator_state(c: Components) -> dict[str, Any] | None:
    allocator = getattr(c.driver, "allocator", None)
    return allocator.state_dict() if allocator is not None else None


# ---- one update's bookkeeping ------------------------------------------------------------------

class Progress:
    """Turns each update into a metrics row and a checkpoint when due."""

    def __init__(self, cfg: TrainConfig, c: Components, log: RunLog, ckpt: CheckpointManager, start: int):
        self.cfg, self.c, self.log, self.ckpt = cfg, c, log, ckpt
        self.started = time.perf_counter()
        self.elapsed_before = log.rows()[-1]["elapsed_s"] if start and log.rows() else 0.0
        self.trained_episodes = int(log.rows()[-1]["episodes"]) if start and log.rows() else 0
        self.last = time.perf_counter()

    def record(self, update: int, version: int, batch: Any, stats: Any, extra: dict[str, float]) -> dict[str, float]:
        now = time.perf_counter()
        tally = self.c.driver.take_tally()
        take_dropped = getattr(self.c.dm, "take_dropped", None)
        dropped = take_dropped() if take_dropped is not None else []
        self.trained_episodes += len(batch.episodes)
        wall = max(now - self.last, 1e-9)
        self.last = now
        row: dict[str, float] = {
            "update": update, "policy_version": version, "episodes": self.trained_episodes,
            "success_rate": tally.successes / tally.episodes if tally.episodes else float("nan"),
            "reward_mean": tally.reward_sum / tally.episodes if tally.episodes else float("nan"),
            "collected_episodes": tally.episodes, "batch_episodes": len(batch.episodes),
            "capped_turns": sum(t.finish_reason == "length" for e in batch.episodes for t in e.turns),
            "batch_reward_mean": float(np.mean([e.total_reward for e in batch.episodes])),
            "staleness_mean": float(np.mean(batch.staleness)) if batch.staleness else 0.0,
            "staleness_max": float(max(batch.staleness, default=0)),
            "tokens_per_s": stats.tokens / wall, "update_s": stats.seconds, "iteration_s": wall,
            "lr": float(self.c.scheduler.get_last_lr()[0]),
            "elapsed_s": self.elapsed_before + now - self.started,
            **stats.flat(), **self.c.dm.metrics().flat(), **extra, **_drop_shares(dropped, len(batch.episodes)),
        }
        self.log.log(row, [e.id for e in batch.episodes] if self.cfg.log_episode_ids else None)
        self.write_credit(update, version - 1, dropped)
        every = self.cfg.checkpoint_every
        if (every and update % every == 0) or update == self.cfg.updates:
            self.save(update, version)
        return row

    def write_credit(self, update: int, trained_version: int, dropped: list[tuple[str, int, str]]) -> None:
        """Store what this update computed per turn, and which episodes the data manager dropped."""
        store, result = self.log.store, self.c.updater.last_credit
        if store is None:
            return
        records = records_from_result(result, run_id=self.cfg.name, update=update,
                                      policy_version=trained_version) if result is not None else []
        records += dropped_records(dropped, run_id=self.cfg.name, estimator=self.cfg.estimator,
                                   policy_version=trained_version)
        store.put_credit(records)

    def save(self, update: int, version: int) -> None:
        c = self.c
        models = c.updater.credit_models
        extra = {"credit_models": models.state_dict() if models is not None else None,
                 "trace_allocator": _allocator_state(c)}
        self.ckpt.save(model=c.model, tokenizer=c.tokenizer, optimizer=c.optimizer, scheduler=c.scheduler,
                       critic=c.critic, state=TrainerState(update, version, c.dm.cursor().to_dict(), extra))

    def out_of_time(self) -> bool:
        limit = self.cfg.time_limit_s
        return limit is not None and self.elapsed_before + time.perf_counter() - self.started >= limit

    async def maybe_eval(self, update: int) -> dict[str, float]:
        cfg = self.cfg
        if not (cfg.eval_every and cfg.eval_tasks and update % cfg.eval_every == 0):
            return {}
        rate, n = await evaluate(self.c, cfg)
        low, high = wilson_interval(rate, n)
        return {"eval_success_rate": rate, "eval_success_low": low, "eval_success_high": high}


def _drop_shares(dropped: list[tuple[str, int, str]], trained: int) -> dict[str, float]:
    """Share of the episodes handled since the last update that curation dropped (all reasons, zero variance)."""
    total = len(dropped) + trained
    zero = sum(reason == "zero_variance" for _, _, reason in dropped)
    return {"credit/dropped_share": len(dropped) / total if total else 0.0,
            "credit/zero_variance_share": zero / total if total else 0.0}


# ---- sync: generate a batch, then train --------------------------------------------------------

async def push_initial_weights(c: Components, version: int) -> None:
    """Bind the weight sync to this event loop (engines that live on it) and send the starting weights."""
    if hasattr(c.sync, "loop"):
        c.sync.loop = asyncio.get_running_loop()
    await asyncio.to_thread(c.sync.push, c.model, version)
    c.dm.set_version(version)


async def _sync_loop(cfg: TrainConfig, c: Components, log: RunLog, ckpt: CheckpointManager, start: int,
                     version: int) -> RunResult:
    await push_initial_weights(c, version)
    progress = Progress(cfg, c, log, ckpt, start)
    watch = SignalWatch(cfg.stop_without_signal, log.console)
    update, stopped_by = start, "updates"
    while update < cfg.updates:
        if progress.out_of_time():
            stopped_by = "time_limit"
            break
        batch = await c.driver.collect_batch(version, cfg.max_refill_rounds)  # -- collect a full batch
        if batch is None:  # curation kept no group: nothing to learn from; collect again (or stop)
            if watch.empty_round(c.dm.metrics().dropped):
                stopped_by = "no_signal"
                break
            continue
        watch.trained()
        stats = await asyncio.to_thread(c.updater.update, batch)  # -- one policy update
        update, version = update + 1, version + 1
        await asyncio.to_thread(c.sync.push, c.model, version)    # -- new weights to the rollout side
        c.dm.set_version(version)
        extra = await progress.maybe_eval(update)
        progress.record(update, version, batch, stats, extra)
    return RunResult(update, version, log.rows(), stopped_by)


# ---- async: collection and training overlap through the data manager --------------------------

def trainer_loop(cfg: TrainConfig, c: Components, log: RunLog, ckpt: CheckpointManager, start: int, version: int,
                 *, stop: threading.Event | None = None, evaluate_fn: Any = None) -> RunResult:
    """The trainer side of async mode: pull a batch, update, push weights, record; until done or `stop`."""
    progress = Progress(cfg, c, log, ckpt, start)
    watch = SignalWatch(cfg.stop_without_signal, log.console)
    update, stopped_by = start, "updates"
    while update < cfg.updates and not (stop is not None and stop.is_set()):
        if progress.out_of_time():
            stopped_by = "time_limit"
            break
        batch = c.dm.pull(version=version, timeout=1.0)         # -- wait for curated groups
        if batch is None:  # a round without signal is a batch's worth of groups dropped meanwhile
            if watch.dropped_meanwhile(c.dm.metrics().dropped, cfg.episodes_per_batch):
                stopped_by = "no_signal"
                break
            continue
        watch.trained(c.dm.metrics().dropped)
        stats = c.updater.update(batch)                          # -- one policy update
        update, version = update + 1, version + 1
        c.sync.push(c.model, version)                            # -- the backend swaps weights between batches
        c.dm.set_version(version)
        extra = evaluate_fn(update) if evaluate_fn is not None else {}
        progress.record(update, version, batch, stats, extra)
    return RunResult(update, version, log.rows(), stopped_by)


async def _async_loop(cfg: TrainConfig, c: Components, log: RunLog, ckpt: CheckpointManager, start: int,
                      version: int) -> RunResult:
    await push_initial_weights(c, version)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    evaluator = Progress(cfg, c, log, ckpt, start)

    def evaluate_fn(update: int) -> dict[str, float]:
        return asyncio.run_coroutine_threadsafe(evaluator.maybe_eval(update), loop).result()

    def run_trainer() -> RunResult:
        try:
            return trainer_loop(cfg, c, log, ckpt, start, version, evaluate_fn=evaluate_fn)
        finally:
            loop.call_soon_threadsafe(stop.set)

    producer = asyncio.create_task(c.driver.produce(stop))
    try:
        result = await asyncio.to_thread(run_trainer)
    finally:
        stop.set()
        c.dm.close()
        await asyncio.gather(producer, return_exceptions=True)
    if c.driver.failures:
        raise c.driver.failures[0]
    return result
