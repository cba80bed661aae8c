"""Weight sync into vLLM workers through a process group (NCCL on GPUs), without the disk.

vLLM runs its model in worker processes; a *worker extension* adds methods to
them that the engine calls on every worker (`collective_rpc`). Start the engine
with ``worker_extension_cls="agentgym.policy.vllm_weights.WeightGroupExtension"``
(`VLLMBackend.from_pretrained(..., worker_extension_cls=...)` passes it through),
then `agentgym.trainer.sync_vllm.VLLMProcessGroupSync` on the trainer side:

    join      every worker becomes rank 1 + its vLLM rank of the trainer's `WeightGroup`
    push      the workers start receiving (`agentgym_receive`, with the bucket manifest), the trainer
              broadcasts the buckets, each worker hands its tensors to ``model.load_weights`` (vLLM's
              own loader: fused qkv / gate-up layouts and tensor-parallel slicing happen there),
              then the prefix cache is reset and the backend's version bumped

This follows vLLM's RLHF examples; it needs a GPU build of vLLM and was not run
on the CPU machines agentgym's tests use (they cover the same buckets and group
through `agentgym serve`).
"""

from __future__ import annotations

from typing import Any

EXTENSION = "agentgym.policy.vllm_weights.WeightGroupExtension"


class WeightGroupExtension:
    """Mixed into each vLLM worker (``self.device``, ``self.rank``, ``self.model_runner`` are the worker's)."""

    def agentgym_join(self, host: str, port: int, rank_offset: int, world_size: int, backend: str = "nccl",
                      timeout_s: float = 300.0) -> int:
        from agentgym.policy.weight_group import WeightGroup

        rank = rank_offset + int(self.rank)
        self.agentgym_group = WeightGroup(host, port, rank, world_size, backend=backend, timeout_s=timeout_s,
                                          device=self.device).connect()
        return rank

    def agentgym_receive(self, manifest: dict[str, Any]) -> int:
        """Take one bucketed broadcast and load it; returns the number of tensors loaded."""
        import torch

        from agentgym.policy.weight_buckets import Manifest, unpack

        loaded = 0
        for bucket in Manifest.from_dict(manifest).buckets:
            flat = torch.empty(bucket.numel, dtype=bucket.torch_dtype, device=self.agentgym_group.device)
            self.agentgym_group.broadcast(flat)
            tensors = list(unpack(bucket, flat))
            self.model_runner.model.load_weights(weights=tensors)
            loaded += len(tensors)
        return loaded
