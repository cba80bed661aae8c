"""`run_on_ray(cfg)`: start the actors of one run on a Ray cluster, train, tear everything down.

    data manager actor  <-- push --  rollout workers (collector + policy replica)  <-- env calls -->  env workers
          |                                    ^
          +-- pull --> trainer actor -- weights (object store) --+
                       (rank 0 of world_size trainer ranks, the others `FollowerRank` actors)

Paths in the config are made absolute first, so that every actor (whatever
its working directory) writes the same run directory and store. A local
cluster started here is shut down at the end; a cluster we joined is left
running, with our actors killed.

Rollout and env workers are restarted by Ray when their process dies
(`RaySettings.actor_restarts` times each). In async mode the run goes on: the
episodes in flight on a dead env worker end as infrastructure failures (their
connections drop) and new ones go to its restarted server; the trainer actor
settles what a dead rollout worker left (its in-flight episodes end as
infrastructure failures, its groups are completed by retries), gives the restarted
one the current weights and starts it. Sync mode fails the run, as before.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentgym.trainer.components import data_manager_kwargs
from agentgym.trainer.distributed.group import RankFailure
from agentgym.trainer.distributed.placement import place
from agentgym.trainer.distributed.ray_ranks import rank_env, rendezvous, start_followers
from agentgym.trainer.ray_runtime.data_actor import DataManagerActor
from agentgym.trainer.ray_runtime.env_worker import EnvWorker
from agentgym.trainer.ray_runtime.rollout_worker import RolloutWorker
from agentgym.trainer.ray_runtime.settings import RaySettings
from agentgym.trainer.ray_runtime.trainer_actor import TrainerActor

from agentgym.config import TrainConfig
from agentgym.errors import require
from agentgym.store import IN_FLIGHT_AT_END, TrajectoryStore


def absolute_paths(cfg: TrainConfig) -> TrainConfig:
    """`cfg` with `output_dir` (and a plain-path `store`) resolved against this process's directory."""
    update: dict[str, Any] = {"output_dir": str(Path(cfg.output_dir).resolve())}
    if cfg.store and "://" not in cfg.store:
        update["store"] = str(Path(cfg.store).resolve())
    return cfg.model_copy(update=update)


def start_actors(ray: Any, cfg: TrainConfig, settings: RaySettings) -> dict[str, list[Any]]:
    """Create the run's actors (data manager, env workers, rollout workers, trainer ranks); returns their handles.

    Trainer ranks and rollout workers go into placement-group bundles (`cfg.placement`); with several
    ranks the trainer actor is rank 0 and `FollowerRank` actors are the others, one process group.
    """
    cpus = settings.actor_cpus
    where = place(ray, cfg.placement, cfg.world_size, settings.rollout_workers, cpus=cpus,
                  trainer_gpus=settings.trainer_gpus, rollout_gpus=settings.rollout_gpus)
    dm = ray.remote(DataManagerActor).options(num_cpus=cpus, max_concurrency=32).remote(data_manager_kwargs(cfg))
    restarts = settings.actor_restarts  # a rollout or env worker whose process dies is restarted (see run_on_ray)
    envs = [ray.remote(EnvWorker).options(num_cpus=cpus, max_concurrency=4, max_restarts=restarts)
            .remote(cfg.env, cfg.env_kwargs, cfg.env_runtime, settings.env_worker_sessions)
            for _ in range(settings.env_workers)]
    workers = [ray.remote(RolloutWorker).options(num_cpus=0, num_gpus=settings.rollout_gpus, max_concurrency=8,
                                                 max_restarts=restarts, scheduling_strategy=where.rollout[i])
               .remote(cfg, i, dm, envs) for i in range(settings.rollout_workers)]
    ray.get([w.ready.remote() for w in workers])
    leader: dict[str, Any] = {}
    followers: list[Any] = []
    if cfg.world_size > 1:
        endpoint = rendezvous(ray, where.trainer[0])
        leader["runtime_env"] = {"env_vars": rank_env(0, cfg.world_size, 0, endpoint)}
        followers = start_followers(ray, cfg, where.trainer, endpoint, settings.trainer_gpus)
    trainer = ray.remote(TrainerActor).options(num_cpus=0, num_gpus=settings.trainer_gpus, max_concurrency=2,
                                               scheduling_strategy=where.trainer[0], **leader).remote(cfg, dm, workers)
    return {"data_manager": [dm], "env_workers": envs, "rollout_workers": workers, "trainer": [trainer],
            "trainer_followers": followers, "placement": [where]}


def stop_actors(ray: Any, actors: dict[str, list[Any]]) -> None:
    """Close the rollout workers (collectors, backends) then kill every actor."""
    try:
        ray.get([w.close.remote() for w in actors.get("rollout_workers", [])], timeout=60)
    except Exception:  # a dead or stuck worker: it is killed below either way
        pass
    for name, group in actors.items():
        for actor in group:
            if name == "placement":
                actor.remove(ray)
            else:
                ray.kill(actor)


def await_ranks(ray: Any, run: Any, following: list[Any], timeout_s: float) -> Any:
    """The leader's result; a follower rank that dies first ends the run at once with `RankFailure`.

    Without this the driver would learn of a dead follower only when the leader's next collective fails,
    or after `timeout_s` when the leader is stuck in one.
    """
    pending = [run, *following]
    while run in pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            if ref is run:
                continue
            try:
                ray.get(ref)
            except Exception as exc:  # the actor died (ActorDiedError) or its follow() raised
                rank = following.index(ref) + 1
                raise RankFailure(f"trainer rank {rank} of {len(following) + 1} died ({type(exc).__name__}: "
                                  f"{str(exc)[:300]}); restart the run with --resume to continue from the last "
                                  "checkpoint") from exc
    result = ray.get(run)
    ray.get(pending, timeout=timeout_s)
    return result


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
        following = [f.follow.remote() for f in actors["trainer_followers"]]
        result = await_ranks(ray, trainer.run.remote(resume), following, cfg.dist_timeout_s)
    finally:
        stop_actors(ray, actors)
        if started_here:
            ray.shutdown()
    with TrajectoryStore(cfg.store_url) as store:  # the rollout workers are gone: end what they left in flight
        store.end_in_flight(cfg.name, IN_FLIGHT_AT_END)
    return result


#: The name `trainer.train.train` imports for its `runtime: ray` dispatch.
run_ray = run_on_ray
