"""A process group of its own between the trainer and the rollout engines, for weight broadcasts.

It lives outside torch.distributed's default group (which belongs to the trainer
ranks): a `TCPStore` hosted by the trainer (rank 0) and a `ProcessGroupGloo`
(CPU) or `ProcessGroupNCCL` (GPU) built on it, the pattern vLLM's own RLHF
examples use. Each engine joins as rank 1..N with the trainer's address.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch


class WeightGroup:
    """Trainer (rank 0) plus rollout engines; `broadcast` sends rank 0's tensor to every member.

    Rank 0 may pass port 0 (a free port; read `port`) and tell the members before `connect`,
    which returns when every member has connected.
    """

    def __init__(self, host: str, port: int, rank: int, world_size: int, *, backend: str = "gloo",
                 timeout_s: float = 300.0, device: torch.device | str = "cpu"):
        import torch.distributed as dist

        self.rank, self.world_size, self.backend = rank, world_size, backend
        self.device = torch.device(device)
        timeout = timedelta(seconds=timeout_s)
        if backend not in ("gloo", "nccl"):
            raise ValueError(f"weight group backend must be gloo or nccl, got {backend!r}")
        self.timeout = timeout
        self.store = dist.TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout,
                                   wait_for_workers=False)
        self.pg: Any = None

    def connect(self) -> WeightGroup:
        """Form the group (blocks until every member is in, at most the timeout)."""
        import torch.distributed as dist

        if self.pg is None:
            if self.backend == "nccl":
                self.pg = dist.ProcessGroupNCCL(self.store, self.rank, self.world_size)
            else:
                self.pg = dist.ProcessGroupGloo(self.store, self.rank, self.world_size, self.timeout)
        return self

    def broadcast(self, tensor: torch.Tensor, *, async_op: bool = False) -> Any:
        """In place: rank 0's `tensor` on every member (NCCL needs it on this member's GPU).

        Returns `tensor`; with `async_op` the pending work instead (``.wait()`` it before touching `tensor`):
        broadcasts posted one after another complete in order, so a sender can fill its next bucket and a
        receiver load its last one while a transfer runs."""
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        work = self.pg.broadcast([tensor], opts)
        if async_op:
            return work
        work.wait()
        return tensor

    @property
    def port(self) -> int:
        return self.store.port
