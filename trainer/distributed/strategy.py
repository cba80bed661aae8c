"""How the policy is laid over the ranks: `single`, `ddp` (replicas) or `fsdp2` (shards).

- ``single``: one process, the model as built.
- ``ddp``: `DistributedDataParallel`; every rank holds the full model, gradients are
  all-reduced once per mini-batch (earlier micro-batches run under ``no_sync``).
- ``fsdp2``: `torch.distributed.fsdp.fully_shard` on every transformer block, then
  on the root; each rank holds 1/world of every parameter, gradient and optimizer
  state. On a GPU the sharded fp32 master weights compute in bf16
  (`MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`); `cpu_offload`
  keeps the shards in host memory (`CPUOffloadPolicy`). Gradients are
  reduce-scattered once per mini-batch (``set_requires_gradient_sync``). A LoRA
  model is sharded the same way (PEFT's frozen base and trainable adapter
  weights side by side in each block's shards; only the adapter gets gradients
  and optimizer state).

Both ddp and fsdp2 average gradients over ranks; the update scales each rank's
loss by the world size so that the sum of rank losses is the one-process objective.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from agentgym.trainer.distributed.group import RankGroup
from agentgym.trainer.model import adapter_state, is_lora, merge_lora_state


class Strategy:
    """The policy as the update sees it: `train_module` for forward/backward, `model` for everything else."""

    name = "single"

    def __init__(self, model: Any, group: RankGroup):
        self.model, self.group = model, group
        self.train_module = model

    @contextmanager
    def accumulate(self, sync: bool):
        """Context of one micro-batch's backward; gradients cross ranks only when `sync` (the last one)."""
        yield

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """Every parameter and buffer, unsharded, on the CPU (leader; followers join for fsdp2), in the base
        model's key names with a LoRA adapter merged in (loadable as a Hugging Face model)."""
        return self._merged({k: v.detach().to("cpu") for k, v in self.model.state_dict().items()})

    def _merged(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return merge_lora_state(self.model, state) if is_lora(self.model) else state

    @property
    def needs_gather(self) -> bool:
        """Full weights need every rank (followers must join `full_state_dict`)."""
        return False

    def gathered_state_dict(self) -> dict[str, torch.Tensor]:
        """Leader: the full weights for a consumer (weight sync, a report); followers join when it takes them."""
        if self.needs_gather and self.group.is_leader:
            self.group.lead("gather")
        return self.full_state_dict()


class DDPStrategy(Strategy):
    name = "ddp"

    def __init__(self, model: Any, group: RankGroup):
        super().__init__(model, group)
        from torch.nn.parallel import DistributedDataParallel

        ids = [group.device.index] if group.device.type == "cuda" else None
        # parameters are broadcast from rank 0 here, so every replica starts equal
        self.train_module = DistributedDataParallel(model, device_ids=ids, forward_sync_buffers=False)

    def accumulate(self, sync: bool):
        return nullcontext() if sync else self.train_module.no_sync()


class FSDP2Strategy(Strategy):
    name = "fsdp2"

    def __init__(self, model: Any, group: RankGroup, *, cpu_offload: bool = False):
        super().__init__(model, group)
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
            if group.device.type == "cuda" else MixedPrecisionPolicy()
        offload = CPUOffloadPolicy() if cpu_offload else OffloadPolicy()
        for block in transformer_blocks(model):
            fully_shard(block, mp_policy=mp, offload_policy=offload)
        fully_shard(model, mp_policy=mp, offload_policy=offload)
        model.agentgym_full_state = self.gathered_state_dict  # what `merged_state_dict` calls
        if is_lora(model):
            model.agentgym_adapter_state = self.gathered_adapter_state  # what `lora_adapter_state` calls

    def gathered_adapter_state(self) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """Leader: the whole LoRA adapter for an adapter-only weight sync (followers join: `gather_adapter`)."""
        if self.needs_gather and self.group.is_leader:
            self.group.lead("gather_adapter")
        return adapter_state(self.model)

    @contextmanager
    def accumulate(self, sync: bool):
        self.model.set_requires_gradient_sync(sync)
        try:
            yield
        finally:
            self.model.set_requires_gradient_sync(True)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        return self._merged(get_model_state_dict(self.model, options=options))

    @property
    def needs_gather(self) -> bool:
        return self.group.world_size > 1


def transformer_blocks(model: Any) -> list[torch.nn.Module]:
    """The repeated blocks to shard one by one: the classes a HF model lists in `_no_split_modules`."""
    names = set(getattr(model, "_no_split_modules", None) or [])
    blocks = [m for m in model.modules() if type(m).__name__ in names]
    if not blocks:
        raise ValueError(f"{type(model).__name__} names no transformer block class (_no_split_modules); "
                         "fsdp2 shards per block: use strategy: ddp for this model")
    return blocks


def make_strategy(name: str, model: Any, group: RankGroup, *, cpu_offload: bool = False) -> Strategy:
    if name == "ddp":
        return DDPStrategy(model, group)
    if name == "fsdp2":
        return FSDP2Strategy(model, group, cpu_offload=cpu_offload)
    return Strategy(model, group)


def grad_norm_value(norm: Any) -> float:
    """`clip_grad_norm_`'s result as a float (a DTensor under fsdp2)."""
    full = getattr(norm, "full_tensor", None)
    return float(full() if full is not None else norm)
