"""The trainer's side of weight sync into vLLM workers through a process group (`agentgym.policy.vllm_weights`).

The engine must have been started with ``worker_extension_cls=agentgym.policy.vllm_weights.EXTENSION``.
NCCL on GPUs, gloo on a CPU build of vLLM (the engine test runs it so).
"""

from __future__ import annotations

import asyncio
from typing import Any

from agentgym.trainer.weight_sync import WeightSync


class VLLMProcessGroupSync(WeightSync):
    """`WeightSync` into an in-process `VLLMBackend` whose workers carry `WeightGroupExtension`."""

    name = "process_group"

    def __init__(self, backend: Any, *, loop: asyncio.AbstractEventLoop | None = None, host: str = "127.0.0.1",
                 group_backend: str | None = None, bucket_bytes: int = 256 << 20, timeout_s: float = 300.0):
        import torch

        self.backend, self.loop, self.host = backend, loop, host
        group_backend = group_backend or ("nccl" if torch.cuda.is_available() else "gloo")
        self.group_backend, self.bucket_bytes, self.timeout_s = group_backend, bucket_bytes, timeout_s
        self.group: Any = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def _run(self, coro: Any) -> Any:
        if self.loop is None:
            raise RuntimeError("VLLMProcessGroupSync needs loop= (the event loop that owns the engine)")
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def connect(self) -> Any:
        from agentgym.policy.weight_group import WeightGroup

        if self.group is None:
            workers = int(self.backend.engine.vllm_config.parallel_config.world_size)
            device = "cuda" if self.group_backend == "nccl" else "cpu"
            group = WeightGroup(self.host, 0, 0, workers + 1, backend=self.group_backend, timeout_s=self.timeout_s,
                                device=device)
            joined = self._run(self.backend.engine.collective_rpc("agentgym_join", kwargs={
                "host": self.host, "port": group.port, "rank_offset": 1, "world_size": workers + 1,
                "backend": self.group_backend, "timeout_s": self.timeout_s}))
            self.group = group.connect()
            joined.result(timeout=self.timeout_s)
        return self.group

    def push(self, model: Any, version: int) -> int:
        from agentgym.trainer.model import merged_state_dict

        from agentgym.policy.weight_buckets import pack, plan

        state = merged_state_dict(model)
        group = self.connect()
        manifest = plan(state, self.bucket_bytes)
        receiving = self._run(self.backend.engine.collective_rpc("agentgym_receive",
                                                                 kwargs={"manifest": manifest.to_dict()}))
        for flat in pack(state, manifest, device=group.device):
            group.broadcast(flat)
        receiving.result(timeout=self.timeout_s)
        self._run(self.backend.engine.reset_prefix_cache()).result(timeout=self.timeout_s)
        return self.backend._bump_version(version)
