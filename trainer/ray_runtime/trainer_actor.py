"""The trainer actor: the local run's policy side and loops, with every other stage behind a Ray handle.

`TrainerActor.run` is `trainer.train.train` for one process that holds only
the policy: it builds `build_policy_side(cfg)`, resumes or warm-starts exactly
as a local run does, and runs the same loops (`trainer.loops.sync_loop` for sync
mode, `trainer.loops.trainer_loop` for async mode) over a `trainer.parts.Components`
whose data manager, rollout driver, evaluator and weight sync are proxies to the
other actors:

- weights: after each update the merged state dict goes into the object store
  once (`ray.put`) and every rollout worker loads it as the new policy version;
- sync mode: rollout worker 0 collects each batch (the local loop's collection);
- async mode: every rollout worker produces until the run ends; a watchdog stops
  the loop early when a worker reports a collection failure, which is then raised,
  and rejoins a rollout worker that Ray restarted (`supervisor.RolloutSupervisor`).
  A dead worker misses weight pushes and tallies until it rejoins.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
from collections.abc import Iterable
from typing import Any

from agentgym.trainer.ray_runtime.data_actor import RemoteDataManager
from agentgym.trainer.ray_runtime.env_worker import await_ref
from agentgym.trainer.ray_runtime.supervisor import RolloutSupervisor
from agentgym.trainer.weight_sync import WeightSync

from agentgym.collector.config import CollectResult, Task
from agentgym.config import TrainConfig
from agentgym.data import TrainBatch


class CollectionFailed(RuntimeError):
    """A rollout worker's collection failed during an async run."""


class RayWeightSync(WeightSync):
    """Weight sync through the object store: one `ray.put`, every rollout worker loads it.

    A worker whose process died misses the push; the last weights are kept so that it loads them when
    it rejoins (`rejoin`), under the same lock as a push, so a worker never goes back a version."""

    name = "ray"

    def __init__(self, workers: list[Any]):
        self.workers = workers
        self._lock = threading.Lock()
        self._last: tuple[Any, int] | None = None  #: (object ref, version) of the last push

    def push(self, model: Any, version: int) -> int:
        import ray
        from agentgym.trainer.model import merged_state_dict

        state = {k: v.detach().to("cpu") for k, v in merged_state_dict(model).items()}
        with self._lock:
            ref = ray.put(state)
            self._last = (ref, version)
            versions = []
            for call in [w.update_weights.remote(ref, version) for w in self.workers]:
                try:
                    versions.append(ray.get(call))
                except ray.exceptions.RayActorError:  # died: it loads these weights when it rejoins
                    continue
        if not versions or any(v != version for v in versions):
            raise RuntimeError(f"rollout workers report policy versions {versions} after loading version {version}")
        return version

    def rejoin(self, worker: Any) -> int:
        """Load the last pushed weights into a restarted `worker` (unless it has them); returns its version."""
        import ray

        with self._lock:
            if self._last is None:
                return ray.get(worker.ready.remote())
            ref, version = self._last
            if ray.get(worker.ready.remote()) >= version:
                return version
            return ray.get(worker.update_weights.remote(ref, version))


class RemoteAllocator:
    """TRACE's branch allocator as checkpoints see it: saved from worker 0, loaded into every worker.

    Each rollout worker allocates its own branches; with several workers their statistics diverge
    between checkpoints and a resumed run starts them all from worker 0's.
    """

    def __init__(self, workers: list[Any]):
        self.workers = workers

    def state_dict(self) -> dict[str, Any] | None:
        import ray

        return ray.get(self.workers[0].allocator_state.remote())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        import ray

        ray.get([w.load_allocator_state.remote(state) for w in self.workers])


class RemoteDriver:
    """The rollout driver's face to the trainer loops: batches from worker 0, tallies from all workers."""

    def __init__(self, workers: list[Any], *, trace: bool = False):
        self.workers = workers
        self.failures: list[BaseException] = []
        self.allocator = RemoteAllocator(workers) if trace else None

    async def collect_batch(self, version: int, max_rounds: int = 4) -> TrainBatch | None:
        return await await_ref(self.workers[0].collect_batch.remote(version, max_rounds))

    def take_tally(self) -> Any:
        return merge_tallies(reachable([w.take_tally.remote() for w in self.workers]))


def reachable(calls: list[Any]) -> list[Any]:
    """The results of `calls` to rollout workers, leaving out those of workers that died (restarting)."""
    import ray

    out = []
    for call in calls:
        try:
            out.append(ray.get(call))
        except ray.exceptions.RayActorError:
            continue
    return out


def merge_tallies(tallies: Iterable[Any]) -> Any:
    """One `CollectTally` summing the workers' (the earliest start time is kept)."""
    from agentgym.trainer.collection import CollectTally

    out = CollectTally()
    items = list(tallies)
    for f in dataclasses.fields(CollectTally):
        if f.name == "started":
            out.started = min((t.started for t in items), default=out.started)
        else:
            setattr(out, f.name, sum((getattr(t, f.name) for t in items), getattr(out, f.name)))
    return out


class RemoteEvalCollector:
    """Held-out evaluation on rollout worker 0 (not stored, not trained)."""

    def __init__(self, worker: Any):
        self.worker = worker

    async def collect(self, tasks: Iterable[Task], *, group_size: int = 1) -> CollectResult:
        return await await_ref(self.worker.evaluate.remote(list(tasks), group_size))


class TrainerActor:
    """Actor body (see the module docstring)."""

    def __init__(self, cfg: TrainConfig, data_manager: Any, workers: list[Any]):
        import torch
        from agentgym.trainer.components import build_policy_side, split_tasks
        from agentgym.trainer.loops import seed_everything
        from agentgym.trainer.parts import Components

        from agentgym.env_facts import inspect_env
        from agentgym.store import TrajectoryStore

        if cfg.torch_threads:
            torch.set_num_threads(cfg.torch_threads)
        seed_everything(cfg.seed)
        self.cfg, self.workers = cfg, workers
        self.store = TrajectoryStore(cfg.store_url)
        self.dm_actor = data_manager
        p = build_policy_side(cfg)
        train_tasks, eval_tasks = split_tasks(cfg, inspect_env(cfg.env, cfg.env_kwargs))
        self.parts = Components(p, RayWeightSync(workers), RemoteDataManager(data_manager),
                                RemoteDriver(workers, trace=cfg.estimator == "trace"), train_tasks, eval_tasks,
                                RemoteEvalCollector(workers[0]) if cfg.eval_tasks else None)

    def run(self, resume: bool = False) -> Any:
        """Train to the end (or the time limit); with `resume`, continue from the latest checkpoint."""
        from agentgym.trainer.distributed.checkpoint import checkpoint_manager
        from agentgym.trainer.loops import sync_loop
        from agentgym.trainer.run_log import RunLog

        cfg, c = self.cfg, self.parts
        ckpt = checkpoint_manager(cfg, c)
        latest = ckpt.latest() if resume else None
        log = RunLog(cfg.run_dir, run_id=cfg.name, store=self.store, tensorboard=cfg.tensorboard, plot=cfg.plot,
                     resume=latest is not None)
        try:
            start, version = self._resume(ckpt, latest, log) if latest is not None else self._fresh(log)
            c.sync.push(c.policy.model, version)
            c.dm.set_version(version)
            if cfg.mode == "sync":
                return asyncio.run(sync_loop(cfg, c, log, ckpt, start, version))
            return self._async(log, ckpt, start, version)
        finally:
            log.close()
            group = c.policy.updater.strategy.group
            if group.distributed:  # rank 0 of several trainer rank actors: the followers may leave
                group.release()

    # ---- start: fresh or resumed, as `trainer.train.train` does ------------------------------
    def _fresh(self, log: Any) -> tuple[int, int]:
        from agentgym.trainer.sft import start_fresh

        cfg, c = self.cfg, self.parts
        self.store.log_run(cfg.name, cfg.model_dump())
        start_fresh(cfg, c, log)
        return 0, 0

    def _resume(self, ckpt: Any, latest: Any, log: Any) -> tuple[int, int]:
        import ray
        from agentgym.trainer.loops import restore_extra

        cfg, c, p = self.cfg, self.parts, self.parts.policy
        state = ckpt.load(latest, model=p.model, optimizer=p.optimizer, scheduler=p.scheduler, critic=p.critic)
        p.updater.updates_done = state.update
        restore_extra(c, state.extra)
        ray.get(self.dm_actor.restore.remote(state.cursor, cfg.store_url, cfg.name))
        log.truncate_after(state.update)
        log.console.print(f"[bold]resumed[/] {cfg.name} from {latest.name}: update {state.update}, "
                          f"policy version {state.policy_version}")
        return state.update, state.policy_version

    # ---- async: rollout workers produce, this actor pulls ------------------------------------
    def _async(self, log: Any, ckpt: Any, start: int, version: int) -> Any:
        import ray
        from agentgym.trainer.loops import Progress, trainer_loop

        cfg, c = self.cfg, self.parts
        evaluator = Progress(cfg, c, log, ckpt, start)
        stop = threading.Event()
        supervisor = RolloutSupervisor(self.workers, self.dm_actor, c.sync, cfg.store_url, cfg.name,
                                       say=log.console.print)
        supervisor.begin()
        ray.get([w.start.remote() for w in self.workers])
        failures: list[str] = []
        watchdog = threading.Thread(target=self._watch, args=(stop, supervisor, failures), name="collection-watchdog",
                                    daemon=True)
        watchdog.start()
        try:
            result = trainer_loop(cfg, c, log, ckpt, start, version, stop=stop,
                                  evaluate_fn=lambda update, last: asyncio.run(evaluator.maybe_eval(update, last)))
        finally:
            stop.set()
            watchdog.join()
            c.dm.close()
            failures += [f for fs in reachable([w.halt.remote() for w in self.workers]) for f in fs]
        failures = list(dict.fromkeys(failures))  # the watchdog saw some of them already
        if failures:
            raise CollectionFailed(f"{len(failures)} collection failure(s) on the rollout workers; first: {failures[0]}")
        return result

    def _watch(self, stop: threading.Event, supervisor: RolloutSupervisor, failures: list[str],
               every_s: float = 2.0) -> None:
        """Every `every_s`: rejoin restarted rollout workers; stop the run at a collection failure (kept)."""
        while not stop.wait(every_s):
            try:
                seen = supervisor.check()
            except Exception as exc:  # a rejoin that failed: the run cannot go on as it should
                seen = [f"rejoining a restarted rollout worker failed: {type(exc).__name__}: {str(exc)[:300]}"]
            if seen:
                failures += seen
                stop.set()
