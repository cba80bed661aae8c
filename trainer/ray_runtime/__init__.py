"""`runtime: ray`: env workers, rollout workers, the data manager and the trainer as Ray actors.

The same objects flow as in one process, and the same code runs in each
actor (the collector and `RolloutDriver`, the `DataManager`, the policy side
and loops of `trainer.train`); only the transport between stages changes:

- `env_worker`: `EnvWorker` actors are env servers; the collector drives them through `EnvPool` / `RemoteEnv`;
- `rollout_worker`: `RolloutWorker` actors run the collector against a policy replica and push to the data manager;
- `data_actor`: `DataManagerActor` wraps the data manager; `RemoteDataManager` is its proxy;
- `trainer_actor`: `TrainerActor` pulls batches, updates, and sends weights through the object store;
- `driver`: `run_on_ray(cfg)` creates the actors, runs the trainer, tears everything down;
- `settings`: `RaySettings`, the placement (worker counts, resources, cluster address).

Ray advertises the machine's non-loopback address; on machines where that
must not be used, run inside a loopback-only network namespace
(``scripts/ray-netns.sh``). ``python -m agentgym.trainer.ray_runtime CONFIG`` runs a
config on Ray and prints a JSON summary.
"""

from __future__ import annotations

from agentgym.importing import lazy_attributes

__all__ = ["RaySettings", "run_on_ray", "run_ray"]

#: resolved on first use: an actor imports its own module through this package, and the env worker and data
#: manager actors need neither the driver's torch nor the trainer's components
__getattr__ = lazy_attributes(__name__, {"RaySettings": f"{__name__}.settings", "run_on_ray": f"{__name__}.driver",
                                         "run_ray": f"{__name__}.driver"})
