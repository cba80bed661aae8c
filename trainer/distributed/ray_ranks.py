"""Trainer ranks as Ray actors that form one torch.distributed process group.

`runtime: ray` with `world_size > 1`: the trainer actor is rank 0 (the leader) and
`world_size - 1` `FollowerRank` actors serve its commands (`follower.follow`). Every
rank actor sits in its own bundle of one placement group (one GPU each on a GPU
cluster), and gets the variables torchrun would set (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT). The rendezvous address is a free port on the node of
bundle 0, found by a task placed there, so the group also forms across nodes.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from typing import Any

from agentgym.config import TrainConfig


def free_endpoint() -> tuple[str, int]:
    """(this node's address, a port free on it now)."""
    import ray

    host = ray.util.get_node_ip_address()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return host, s.getsockname()[1]


def rank_env(rank: int, world_size: int, local_rank: int, endpoint: tuple[str, int]) -> dict[str, str]:
    """What torchrun would set for `rank`."""
    return {"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(local_rank),
            "LOCAL_WORLD_SIZE": str(world_size), "MASTER_ADDR": endpoint[0], "MASTER_PORT": str(endpoint[1])}


def rendezvous(ray: Any, bundle0: Any) -> tuple[str, int]:
    """A free endpoint on the node of the leader's bundle (`bundle0`: a scheduling strategy)."""
    return ray.get(ray.remote(free_endpoint).options(num_cpus=0, scheduling_strategy=bundle0).remote())


class FollowerRank:
    """Actor body of ranks 1..N-1: `follow` serves the leader until it says stop."""

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg

    def follow(self) -> int:
        import torch
        from agentgym.trainer.distributed.follower import follow

        if self.cfg.torch_threads:
            torch.set_num_threads(self.cfg.torch_threads)
        torch.manual_seed(self.cfg.seed)
        return follow(self.cfg)


def start_followers(ray: Any, cfg: TrainConfig, strategies: Sequence[Any], endpoint: tuple[str, int],
                    gpus: float) -> list[Any]:
    """Ranks 1..N-1 (each in its bundle, `strategies[rank]`); returns the actor handles."""
    actors = []
    for rank in range(1, cfg.world_size):
        env = rank_env(rank, cfg.world_size, rank, endpoint)
        actors.append(ray.remote(FollowerRank).options(num_cpus=0, num_gpus=gpus, scheduling_strategy=strategies[rank],
                                                       runtime_env={"env_vars": env}).remote(cfg))
    return actors
