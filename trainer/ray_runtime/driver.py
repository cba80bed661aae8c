"""`run_on_ray(cfg)`: start the actors of one run on a Ray cluster, train, tear everything down.

    data manager actor  <-- push --  rollout workers (collector + policy replica)  <-- env calls -->  env workers
          |                                    ^
          +-- pull --> trainer actor -- weights (object store) --+

Paths in the config are made absolute first, so that every actor (whatever
its working directory) writes the same run directory and store. A local
cluster started here is shut down at the end; a cluster we joined is left
running, with our actors killed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentgym.trainer.components import data_manager_kwargs
from agentgym.trainer.ray_runtime.data_actor import DataManagerActor
from agentgym.trainer.ray_runtime.env_worker import EnvWorker
from agentgym.trainer.ray_runtime.rollout_worker import RolloutWorker
from agentgym.trainer.ray_runtime.settings import RaySettings
from agentgym.trainer.ray_runtime.trainer_actor import TrainerActor

from agentgym.config import TrainConfig
from agentgym.errors import require
from agentgym.store import TrajectoryStore


def absolute_paths(cfg: TrainConfig) -> TrainConfig:
    """`cfg` with `output_dir` (and a plain-path `store`) resolved against this process's directory."""
    update: dict[str, Any] = {"output_dir": str(Path(cfg.output_dir).resolve())}
    if cfg.store and "://" not in cfg.store:
        update["store"] = str(Path(cfg.store).resolve())
    return cfg.model_copy(update=update)


def start_actors(ray: Any, cfg: TrainConfig, settings: RaySettings) -> dict[str, list[Any]]:
    """Create the run's actors (data manager, env workers, rollout workers, trainer); returns their handles."""
    cpus = settings.actor_cpus
    dm = ray.remote(DataManagerActor).options(num_cpus=cpus, max_concurrency=32).remote(data_manager_kwargs(cfg))
    envs = [ray.remote(EnvWorker).options(num_cpus=cpus, max_concurrency=settings.env_worker_threads)
            .remote(cfg.env, cfg.env_kwargs) for _ in range(settings.env_workers)]
    workers = [ray.remote(RolloutWorker).options(num_cpus=cpus, num_gpus=settings.rollout_gpus, max_concurrency=8)
               .remote(cfg, i, dm, envs) for i in range(settings.rollout_workers)]
    ray.get([w.ready.remote() for w in workers])
    trainer = ray.remote(TrainerActor).options(num_cpus=cpus, num_gpus=settings.trainer_gpus,
                                               max_concurrency=2).remote(cfg, dm, workers)
    return {"data_manager": [dm], "env_workers": envs, "rollout_workers": workers, "trainer": [trainer]}


def stop_actors(ray: Any, actors: dict[str, list[Any]]) -> None:
    """Close the rollout workers (collectors, backends) then kill every actor."""
    try:
        ray.get([w.close.remote() for w in actors.get("rollout_workers", [])], timeout=60)
    except Exception:  # a dead or stuck worker: it is killed below either way
        pass
    for group in actors.values():
        for actor in group:
            ray.kill(actor)


def run_on_ray(cfg: TrainConfig, *, resume: bool = False, settings: RaySettings | None = None) -> Any:
    """Run `cfg` with every stage as a Ray actor; returns the same `RunResult` as `trainer.train.train`."""
    ray = require("ray", extra="ray", what="runtime: ray")
    settings = settings or RaySettings.from_config(cfg)
    cfg = absolute_paths(cfg)
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    TrajectoryStore(cfg.store_url).close()  # create the schema once, before several actors open it at once
    started_here = not ray.is_initialized()
    if started_here:
        ray.init(**settings.init_kwargs(), log_to_driver=True)
    actors: dict[str, list[Any]] = {}
    try:
        actors = start_actors(ray, cfg, settings)
        [trainer] = actors["trainer"]
        return ray.get(trainer.run.remote(resume))
    finally:
        stop_actors(ray, actors)
        if started_here:
            ray.shutdown()


#: The name `trainer.train.train` imports for its `runtime: ray` dispatch.
run_ray = run_on_ray
