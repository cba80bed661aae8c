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

This follows vLLM's RLHF examples. NCCL on GPUs; on a CPU build of vLLM the same
path runs over gloo (`tests/agentgym/policy/test_vllm_backend.py` pushes weights
into a real CPU engine this way and checks its log-probs).
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
        """Take one push (its buckets, broadcast in order) and load it; returns the number of tensors loaded.

        The tensors go through vLLM's in-place reload (`model_runner.reload_weights`), which also redoes what the
        engine did to the weights after its first load (kernel layouts, CPU GEMM packing): calling the model's
        `load_weights` directly fails on such layers.
        """
        import torch

        from agentgym.policy.weight_buckets import Manifest, unpack

        buckets = Manifest.from_dict(manifest).buckets
        received = [0]

        def tensors() -> Any:
            for bucket in buckets[received[0]:]:
                flat = torch.empty(bucket.numel, dtype=bucket.torch_dtype, device=self.agentgym_group.device)
                self.agentgym_group.broadcast(flat)
                received[0] += 1
                yield from unpack(bucket, flat)

        self.model_runner.reload_weights(weights_iterator=tensors())
        for _ in tensors():  # every bucket must be taken, or the next push's broadcasts would be out of step
            pass
        return sum(len(b.entries) for b in buckets)
