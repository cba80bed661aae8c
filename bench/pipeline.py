"""Pipeline benchmark: sync vs async training, side by side, on a long-tailed generation workload.

    python bench/pipeline.py                 # a rich table
    python bench/pipeline.py --json          # one JSON object
    python bench/pipeline.py --median-s 0.01 --updates 6     # toy scale (the CI smoke test)

Real: the collector (`agentgym.collector.Collector`), the data manager
(`agentgym.data.DataManager`: backpressure, staleness bound, meters), the
rollout driver (`trainer.collection.RolloutDriver`) and the trainer's own loops
(`trainer.loops.sync_loop` / `async_loop`, with their metrics rows and run
log) over the run's one component bag (`trainer.parts.Components`). Both modes
run the same code the `agentgym train` command runs.

SIMULATED (labelled as such):
- the policy (`LongTailBackend`): each episode's generation time is drawn from a
  lognormal with median ``--median-s`` and sigma 1.0; at most ``--in-flight``
  generations run at once (an inference server with that many sequence
  slots); every token carries the policy version at which its generation
  *started* (the conservative choice for staleness);
- the env (`OneTurnEnv`): one turn per episode, reward 1 or 0 from the
  simulated reply, so per-episode generation time is the lognormal draw;
- the training step (`SimulatedUpdate`): a sleep lasting the median time sync
  mode needs to generate one batch, measured first in a calibration phase;
  the weight sync only bumps the simulated backend's version; checkpoints are
  skipped.

Measured: samples/s (trained episodes per wall-clock second) over the whole
loop and in steady state (after the first update, which in both modes waits
for a first batch); trainer idle fraction (1 - time in training steps / time
since the first step began); the largest staleness the data manager handed
to the trainer. Target: async >= 2x sync, staleness <= 2, async trainer idle
< 10%.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: E402
from rich.table import Table  # noqa: E402

from agentgym.collector import Collector  # noqa: E402
from agentgym.config import TrainConfig  # noqa: E402
from agentgym.core import AgentEnv  # noqa: E402
from agentgym.data import DataManager, TrainBatch  # noqa: E402
from agentgym.policy.base import Backend, Completion, FinishReason, GenerationRequest, SamplingParams  # noqa: E402

# ---- simulated pieces (labelled) ---------------------------------------------------------------

class OneTurnEnv(AgentEnv):
    """SIMULATED env: one turn; reward 1 when the reply is "win". Natively async (no threads)."""

    def task_ids(self) -> list[str]:
        return [f"task-{i}" for i in range(256)]

    def reset(self, *, seed=None, options=None):
        task = (options or {}).get("task_id") or "task-0"
        return f"solve {task}", {"task_id": task}

    def step(self, action):
        won = action.strip() == "win"
        return "done", float(won), True, False, {}

    async def areset(self, *, seed=None, options=None):
        return self.reset(seed=seed, options=options)

    async def astep(self, action):
        return self.step(action)


class LongTailBackend(Backend):
    """SIMULATED policy: lognormal generation time per request, `slots` generations at once."""

    name = "simulated-longtail"
    logprob_convention = "simulated: synthetic ids, log-prob 0"

    def __init__(self, *, median_s: float, sigma: float, slots: int, seed: int, tokens_per_s: float = 2000.0):
        super().__init__()
        self.median_s, self.sigma, self.tokens_per_s = median_s, sigma, tokens_per_s
        self._slots = asyncio.Semaphore(slots)
        self._rng = random.Random(seed)

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    async def _one(self, request: GenerationRequest) -> Completion:
        async with self._slots:
            version = self.version  # the weights this generation starts with
            seconds = self._rng.lognormvariate(math.log(self.median_s), self.sigma)
            text = "win" if self._rng.random() < 0.5 else "lose"
            await asyncio.sleep(seconds)
        n = max(1, round(seconds * self.tokens_per_s))
        return Completion(episode_id=request.episode_id, token_ids=list(range(n)), logprobs=[0.0] * n, text=text,
                          finish_reason=FinishReason.STOP, version=version, source=self.name)

    def update_weights(self, weights: Any, *, version: int | None = None) -> int:
        """No weights: the version moves, so tokens sampled afterwards carry the new one."""
        return self._bump_version(version)


@dataclass
class StepStats:
    """What the trainer's metrics row reads from an update (the fields of `trainer.update.UpdateStats`)."""

    tokens: int = 0
    seconds: float = 0.0

    def flat(self) -> dict[str, float]:
        return {"tokens": float(self.tokens), "update_s": self.seconds}


@dataclass
class SimulatedUpdate:
    """SIMULATED training step: sleeps `step_s`; records when each step ran and what it trained."""

    step_s: float
    on_step: Any = None
    credit_models: None = None  #: no learned credit models to update or checkpoint
    last_credit: None = None  #: no credit computed: nothing to write back to the store
    spans: list[tuple[float, float]] = field(default_factory=list)
    episodes: int = 0

    def update(self, batch: TrainBatch) -> StepStats:
        began = time.perf_counter()
        time.sleep(self.step_s)
        ended = time.perf_counter()
        self.spans.append((began, ended))
        self.episodes += len(batch.episodes)
        if self.on_step is not None:
            self.on_step()
        return StepStats(tokens=sum(e.num_action_tokens for e in batch.episodes), seconds=ended - began)


class VersionSync:
    """SIMULATED weight sync: the backend's version moves to the trainer's (no weights to copy).

    A `trainer.weight_sync.WeightSync` (not subclassed: this module loads the trainer lazily).
    """

    name = "simulated"

    def __init__(self, backend: Backend):
        self.backend = backend

    def push(self, model: Any, version: int) -> int:
        return self.backend.update_weights(None, version=version)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Nothing to bind: the simulated backend lives in this process."""


class ConstantLR:
    """Stands in for the LR scheduler the metrics row reads."""

    def get_last_lr(self) -> list[float]:
        return [0.0]


class NoCheckpoints:
    """SIMULATED: a simulated model has nothing to checkpoint."""

    def save(self, **_: Any) -> None:
        return None


# ---- one mode ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Workload:
    median_s: float
    sigma: float
    batch: int
    group_size: int
    in_flight: int
    staleness_bound: int
    updates: int
    seed: int
    max_in_flight: int | None  #: async backpressure limit; None: what `build_components` sets


def run_config(w: Workload, mode: str, output_dir: str) -> TrainConfig:
    return TrainConfig(name=f"pipeline-{mode}", output_dir=output_dir, mode=mode, updates=w.updates,
                       groups_per_batch=w.batch // w.group_size, group_size=w.group_size, concurrency=w.in_flight,
                       staleness_bound=w.staleness_bound, drop_zero_variance=False, checkpoint_every=0,
                       tensorboard=False, plot=False, log_episode_ids=False, seed=w.seed)


def build(cfg: TrainConfig, w: Workload, step_s: float, seed: int, max_in_flight: int | None = None) -> Any:
    """The run's components as `trainer.components.build_components` wires them, with simulated model parts."""
    from agentgym.trainer.collection import RolloutDriver
    from agentgym.trainer.components import data_manager_kwargs
    from agentgym.trainer.parts import Components, PolicySide

    backend = LongTailBackend(median_s=w.median_s, sigma=w.sigma, slots=w.in_flight, seed=seed)
    collector = Collector(OneTurnEnv, backend, None, concurrency=cfg.concurrency, max_turns=1, progress=False,
                          run_id=cfg.name, sampling=SamplingParams(max_new_tokens=4096))
    kwargs = data_manager_kwargs(cfg)
    if cfg.mode == "async" and max_in_flight is not None:
        kwargs["max_in_flight"] = max_in_flight
    dm = DataManager(**kwargs)
    tasks = OneTurnEnv().task_ids()
    driver = RolloutDriver(collector, dm, tasks, seed=seed, success_reward=cfg.success_reward)
    policy = PolicySide(model=None, tokenizer=None, optimizer=None, scheduler=ConstantLR(), critic=None,
                        updater=SimulatedUpdate(step_s), prompt_tokenizer=None, packed=False)  # SIMULATED: no weights
    return Components(policy, VersionSync(backend), dm, driver, tasks, backend=backend, collectors=[collector])


async def calibrate(w: Workload, batches: int, output_dir: str) -> tuple[float, list[float]]:
    """Median seconds sync mode needs to generate one batch (the simulated training step lasts that long)."""
    cfg = run_config(w, "sync", output_dir)
    c = build(cfg, w, 0.0, seed=w.seed + 1)
    times = []
    for version in range(batches):
        began = time.perf_counter()
        batch = await c.driver.collect_batch(version)
        times.append(time.perf_counter() - began)
        assert batch is not None and len(batch.episodes) == w.batch
        c.sync.push(None, version + 1)
    await c.aclose()
    return statistics.median(times), times


@dataclass
class ModeResult:
    mode: str
    samples_per_s: float  #: trained episodes / wall seconds of the whole loop
    steady_samples_per_s: float  #: trained episodes after the first update / seconds after it
    trainer_idle_frac: float  #: 1 - training-step time / time since the first step began
    dm_trainer_idle_frac: float  #: the data manager's own meter (async waits in `pull`)
    max_staleness: int
    staleness_histogram: dict[int, int]
    dropped: dict[str, int]
    seconds: float
    updates: int


async def run_mode(w: Workload, mode: str, step_s: float, output_dir: str, progress: Progress | None) -> ModeResult:
    from agentgym.trainer.loops import async_loop, sync_loop
    from agentgym.trainer.run_log import RunLog

    cfg = run_config(w, mode, output_dir)
    c = build(cfg, w, step_s, seed=w.seed, max_in_flight=w.max_in_flight)
    if progress is not None:
        task = progress.add_task(f"{mode} (simulated policy and step)", total=w.updates)
        c.policy.updater.on_step = lambda: progress.advance(task)
    log = RunLog(cfg.run_dir, run_id=cfg.name, store=None, tensorboard=False, plot=False,
                 console=Console(file=io.StringIO()))
    loop = sync_loop if mode == "sync" else async_loop
    c.sync.push(None, 0)
    c.dm.set_version(0)
    began = time.perf_counter()
    try:
        result = await loop(cfg, c, log, NoCheckpoints(), 0, 0)
    finally:
        ended = time.perf_counter()
        log.close()
        await c.aclose()
    updater = c.policy.updater
    spans = updater.spans
    busy = sum(b - a for a, b in spans)
    first_start, first_end = spans[0]
    steady_eps = updater.episodes * (len(spans) - 1) / len(spans)
    m = c.dm.metrics()
    return ModeResult(mode, updater.episodes / (ended - began), steady_eps / max(spans[-1][1] - first_end, 1e-9),
                      1.0 - busy / max(spans[-1][1] - first_start, 1e-9), m.trainer_idle_frac, m.max_staleness,
                      m.staleness_histogram, m.dropped, ended - began, result.updates)


# ---- report ------------------------------------------------------------------------------------

def summary(sync: ModeResult, asyn: ModeResult, step_s: float, w: Workload) -> dict[str, Any]:
    return {
        "sync_samples_per_s": round(sync.steady_samples_per_s, 3),
        "async_samples_per_s": round(asyn.steady_samples_per_s, 3),
        "async_speedup": round(asyn.steady_samples_per_s / sync.steady_samples_per_s, 3),
        "async_trainer_idle_frac": round(asyn.trainer_idle_frac, 4),
        "sync_trainer_idle_frac": round(sync.trainer_idle_frac, 4),
        "max_staleness": asyn.max_staleness,
        "whole_run_async_speedup": round(asyn.samples_per_s / sync.samples_per_s, 3),
        "sync_samples_per_s_whole_run": round(sync.samples_per_s, 3),
        "async_samples_per_s_whole_run": round(asyn.samples_per_s, 3),
        "async_dm_trainer_idle_frac": round(asyn.dm_trainer_idle_frac, 4),
        "async_dropped": sum(asyn.dropped.values()),
        "simulated_step_s": round(step_s, 4),
        "median_s": w.median_s,
        "sync_updates": sync.updates,
        "async_updates": asyn.updates,
        "seconds": round(sync.seconds + asyn.seconds, 1),
    }


def print_table(console: Console, sync: ModeResult, asyn: ModeResult, out: dict[str, Any], w: Workload,
                calibration: list[float]) -> None:
    table = Table(title=f"pipeline: sync vs async, SIMULATED long-tailed policy (lognormal median {w.median_s:g} s, "
                        f"sigma {w.sigma:g}) and SIMULATED {out['simulated_step_s']:.3f} s training step")
    for col in ("mode", "samples/s", "whole run", "trainer idle", "max stale", "dropped", "wall s"):
        table.add_column(col, justify="right")
    for r in (sync, asyn):
        table.add_row(r.mode, f"{r.steady_samples_per_s:.1f}", f"{r.samples_per_s:.1f}", f"{r.trainer_idle_frac:.1%}",
                      str(r.max_staleness), str(sum(r.dropped.values())), f"{r.seconds:.1f}")
    console.print(table)
    console.print("samples/s: trained episodes per second after the first update (steady state); whole run: over "
                  "the whole loop. Staleness of trained episodes: "
                  + "; ".join(f"{r.mode} {r.staleness_histogram}" for r in (sync, asyn))
                  + f"; dropped as too stale (async): {asyn.dropped.get('stale', 0)} episodes")
    console.print(f"batches of {w.batch} episodes (groups of {w.group_size}), {w.in_flight} generations in flight, "
                  f"staleness bound {w.staleness_bound}, {w.updates} updates per mode; sync batch generation "
                  f"calibration (s): {', '.join(f'{t:.3f}' for t in calibration)}")
    ok = out["async_speedup"] >= 2 and out["max_staleness"] <= 2 and out["async_trainer_idle_frac"] < 0.10
    console.print(f"async speedup [bold]{out['async_speedup']:.2f}x[/] (whole run {out['whole_run_async_speedup']:.2f}x), "
                  f"async trainer idle {out['async_trainer_idle_frac']:.1%}, max staleness {out['max_staleness']}: "
                  f"target (>= 2x, <= 2, < 10%) {'[green]met[/]' if ok else '[red]not met[/]'}")


async def main(args: argparse.Namespace) -> dict[str, Any]:
    w = Workload(args.median_s, args.sigma, args.batch, args.group_size, args.in_flight, args.staleness_bound,
                 args.updates, args.seed, args.max_in_flight)
    console = Console(stderr=args.json)
    with tempfile.TemporaryDirectory(prefix="agentgym-pipeline-") as tmp:
        step_s, calibration = await calibrate(w, args.calibration_batches, tmp)
        with Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, disable=args.json) as progress:
            sync = await run_mode(w, "sync", step_s, tmp, progress)
            asyn = await run_mode(w, "async", step_s, tmp, progress)
    out = summary(sync, asyn, step_s, w)
    if args.json:
        print(json.dumps(out))
    else:
        print_table(console, sync, asyn, out, w, calibration)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--median-s", type=float, default=0.04, help="median generation time of one episode")
    parser.add_argument("--sigma", type=float, default=1.0, help="sigma of the lognormal generation time")
    parser.add_argument("--batch", type=int, default=64, help="episodes per training batch")
    parser.add_argument("--group-size", type=int, default=8, help="episodes per group (batch / group-size groups)")
    parser.add_argument("--in-flight", type=int, default=64, help="generations running at once")
    parser.add_argument("--staleness-bound", type=int, default=2, help="k: older samples are dropped")
    parser.add_argument("--updates", type=int, default=30, help="updates per mode")
    parser.add_argument("--calibration-batches", type=int, default=21, help="sync batches timed to set the step")
    parser.add_argument("--max-in-flight", type=int, default=None,
                        help="async: episodes in flight plus queued (default: as the trainer sets it, "
                             "in-flight + staleness-bound x batch)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.batch % args.group_size:
        parser.error(f"--batch ({args.batch}) must be a multiple of --group-size ({args.group_size})")
    return args


if __name__ == "__main__":
    asyncio.run(main(parse_args()))
