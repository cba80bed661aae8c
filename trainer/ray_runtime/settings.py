"""How a run is laid out on Ray: worker counts, per-actor resources, and the cluster to use.

`TrainConfig` says *what* to train (`runtime: ray` picks this runtime); these
settings say *where*. The defaults fit one machine: one env worker, one
rollout worker, actors that reserve no CPU (so they never wait for each other
to be scheduled on a small node), and a local cluster started on 127.0.0.1
when no cluster is running and ``RAY_ADDRESS`` is unset.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from agentgym.errors import ConfigError


@dataclass(frozen=True)
class RaySettings:
    """Placement of one run's actors (see the module docstring)."""

    rollout_workers: int = 1  #: actors that run a collector and a policy replica each
    env_workers: int = 1  #: actors that hold the envs (0: each rollout worker makes its envs in process)
    actor_cpus: float = 0.0  #: CPUs each actor reserves for scheduling (0: share the node's cores)
    trainer_gpus: float = 0.0  #: GPUs the trainer actor reserves (set 1 on a GPU node)
    rollout_gpus: float = 0.0  #: GPUs each rollout worker reserves
    env_worker_sessions: int = 256  #: sessions (envs) one env worker's env server holds at once
    #: times Ray restarts a rollout or env worker whose process died (async mode: the run goes on, see driver.py)
    actor_restarts: int = 3
    address: str | None = None  #: cluster to join; None: RAY_ADDRESS, else a new local cluster
    num_cpus: int | None = None  #: CPUs of a local cluster we start (None: the machine's)
    node_ip: str = "127.0.0.1"  #: address a local cluster we start binds to
    temp_dir: str | None = None  #: Ray's session directory root for a local cluster (None: Ray's default)

    def __post_init__(self) -> None:
        if self.rollout_workers < 1:
            raise ConfigError(f"rollout_workers must be >= 1, got {self.rollout_workers}")
        if self.env_workers < 0:
            raise ConfigError(f"env_workers must be >= 0 (0: envs live in the rollout workers), got {self.env_workers}")
        if min(self.actor_cpus, self.trainer_gpus, self.rollout_gpus) < 0:
            raise ConfigError("actor_cpus, trainer_gpus and rollout_gpus must be >= 0")
        if self.actor_restarts < -1:
            raise ConfigError(f"actor_restarts must be >= 0 (or -1: without limit), got {self.actor_restarts}")
        if self.env_worker_sessions < 1:
            raise ConfigError(f"env_worker_sessions must be >= 1, got {self.env_worker_sessions}")

    @classmethod
    def from_config(cls, cfg: Any) -> RaySettings:
        """The placement a `TrainConfig` asks for (`ray_rollout_workers`, `ray_env_workers`, `ray_address`)."""
        return cls(rollout_workers=cfg.ray_rollout_workers, env_workers=cfg.ray_env_workers, address=cfg.ray_address,
                   trainer_gpus=cfg.ray_trainer_gpus, rollout_gpus=cfg.ray_rollout_gpus)

    def init_kwargs(self) -> dict[str, Any]:
        """Arguments of `ray.init` for this session."""
        address = self.address or os.environ.get("RAY_ADDRESS")
        if address:
            return {"address": address}
        kwargs: dict[str, Any] = {"num_cpus": self.num_cpus or os.cpu_count() or 1, "include_dashboard": False,
                                  "_node_ip_address": self.node_ip}
        if self.temp_dir:
            kwargs["_temp_dir"] = self.temp_dir
        return kwargs
