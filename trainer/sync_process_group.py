"""Weight sync through a process group: the trainer broadcasts bucketed weights to `agentgym serve` engines.

    trainer (rank 0)                                  engines (ranks 1..N)
    WeightGroup(host, port 0) -- POST /agentgym/weights/join {host, port, rank, world} -->  join in a thread
    connect()  <----------------------- the group forms ----------------------------->
    per push:  POST /agentgym/weights/receive {manifest, version} (in a thread each)
               broadcast bucket 1..k  ---------------------------------------------->  receive, load
               <-------------------------- {"version": v} ----------------------------

NCCL on GPUs (the buckets go device to device), gloo on CPUs. The manifest travels
in the HTTP body, the bytes only through the group. Pass `host` = an address of
this machine that the engines reach (127.0.0.1 when they run here).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch
from agentgym.trainer.weight_sync import EngineSync

from agentgym.policy.weight_buckets import DEFAULT_BUCKET_BYTES, BufferPool, pack, plan
from agentgym.policy.weight_group import WeightGroup


class ProcessGroupSync(EngineSync):
    """`WeightSync` into `agentgym serve` engines at `base_urls` through one `WeightGroup`."""

    name = "process_group"

    def __init__(self, base_urls: list[str], *, host: str = "127.0.0.1", group_backend: str | None = None,
                 bucket_bytes: int = DEFAULT_BUCKET_BYTES, timeout_s: float = 300.0, backend: Any = None,
                 adapter_only: bool = True):
        super().__init__(base_urls, timeout_s=timeout_s, backend=backend, adapter_only=adapter_only)
        self.host, self.bucket_bytes = host, bucket_bytes
        self.group_backend = group_backend or ("nccl" if torch.cuda.is_available() else "gloo")
        self.group: WeightGroup | None = None
        self.buffers = BufferPool()  #: the send buckets, reused push after push

    def connect(self) -> WeightGroup:
        """Form the group with every engine (once)."""
        if self.group is None:
            device = "cuda" if self.group_backend == "nccl" else "cpu"
            group = WeightGroup(self.host, 0, 0, len(self.roots) + 1, backend=self.group_backend,
                                timeout_s=self.timeout_s, device=device)
            for rank, root in enumerate(self.roots, start=1):
                self.post(root, "/agentgym/weights/join", {"host": self.host, "port": group.port, "rank": rank,
                          "world_size": len(self.roots) + 1, "backend": self.group_backend,
                          "timeout_s": self.timeout_s})
            self.group = group.connect()
        return self.group

    def push_state(self, state: dict[str, torch.Tensor], version: int, *,
                   lora_scaling: dict[str, float] | None = None) -> int:
        group = self.connect()
        manifest = plan(state, self.bucket_bytes)
        body = {"manifest": manifest.to_dict(), "version": version, "lora_scaling": lora_scaling}
        with ThreadPoolExecutor(len(self.roots)) as pool:
            replies = [pool.submit(self.post, root, "/agentgym/weights/receive", body) for root in self.roots]
            in_flight: list[Any] = []  # bucket i+1 is packed while bucket i is sent (two send buffers)
            for flat in pack(state, manifest, device=group.device, buffers=self.buffers):
                in_flight.append(group.broadcast(flat, async_op=True))
                if len(in_flight) == 2:
                    in_flight.pop(0).wait()  # its slot is refilled by the next bucket but one
            for work in in_flight:
                work.wait()
            versions = [r.result()["version"] for r in replies]
        return self._loaded(versions, version)
