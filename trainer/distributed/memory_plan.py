"""The trainer's memory per rank, before any weight is loaded: printed at start, refused when it cannot fit.

From the model's config alone (the model is instantiated on the `meta` device, so
parameter counts are exact and nothing is allocated), for the run's strategy and
world size, per rank:

    parameters     all of them; / world under fsdp2 (fp32 master shards)
    gradients      trainable ones; / world under fsdp2
    optimizer      AdamW's two moments per trainable parameter; / world under fsdp2
    reference      the frozen KL reference (kl != off, no LoRA)
    rollout copy   the in-process hf rollout replica on the same device (backend: hf)
    activations    one micro-batch of `micro_batch_tokens`: per layer about 34 x hidden bytes per
                   token at 2-byte compute (Korthikanti et al.; one layer's worth plus the saved
                   layer inputs with gradient checkpointing), plus fp32 logits and their
                   log-softmax and gradient over the vocabulary
    fsdp2 gather   one transformer block all-gathered for its forward

Capacity is the device's memory (`torch.cuda.mem_get_info`) or, on CPU, the host's
divided by the ranks on it; `memory_limit_gib` overrides it. More than 90% of it is
refused with the largest items and the settings that shrink them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentgym.errors import ConfigError

GIB = 1 << 30
HEADROOM = 0.9


@dataclass
class MemoryPlan:
    """Bytes per rank by item, and the capacity they must fit in."""

    items: dict[str, float] = field(default_factory=dict)
    capacity: float = 0.0
    device: str = "cpu"
    ranks: str = ""

    @property
    def total(self) -> float:
        """Bytes on the device (items marked [host] live in host memory: fsdp2 CPU offload)."""
        return sum(v for k, v in self.items.items() if not k.endswith("[host]"))

    def table(self) -> str:
        rows = [f"memory plan per rank ({self.ranks}, {self.device}):"]
        rows += [f"  {name:<28s} {value / GIB:8.3f} GiB" for name, value in self.items.items()]
        rows.append(f"  {'total':<28s} {self.total / GIB:8.3f} GiB of {self.capacity / GIB:.1f} GiB")
        return "\n".join(rows)

    def check(self) -> None:
        if self.total <= HEADROOM * self.capacity:
            return
        biggest = sorted(self.items.items(), key=lambda kv: -kv[1])[:3]
        top = ", ".join(f"{k} {v / GIB:.2f} GiB" for k, v in biggest)
        raise ConfigError(f"the trainer needs {self.total / GIB:.2f} GiB per rank but {self.device} has "
                          f"{self.capacity / GIB:.2f} GiB ({HEADROOM:.0%} usable); largest: {top}. Shrink it: "
                          "strategy: fsdp2 with a larger world_size (shards parameters, gradients and optimizer "
                          "state), fsdp_cpu_offload: true, lower micro_batch_tokens, gradient_checkpointing: true, "
                          "or lora_rank > 0 (trains adapters only)")


def count_parameters(config: Any, lora_rank: int, lora_targets: list[str]) -> tuple[int, int, Any]:
    """(all parameters, trainable ones, meta model) of a HF config, with nothing allocated."""
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    total = sum(p.numel() for p in model.parameters())
    if not lora_rank:
        return total, total, model
    adapters = 0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in lora_targets:
            adapters += lora_rank * (module.in_features + module.out_features)
    return total + adapters, adapters, model


def plan_memory(cfg: Any, config: Any, *, world_size: int, device: Any, local_ranks: int,
                compute_bytes: int, param_bytes: int) -> MemoryPlan:
    """The per-rank plan of `cfg` (a TrainConfig) for the model `config` (a HF config)."""
    total, trainable, meta = count_parameters(config, cfg.lora_rank, list(cfg.lora_target_modules))
    shard = world_size if cfg.strategy == "fsdp2" else 1
    hidden, layers, vocab = config.hidden_size, config.num_hidden_layers, config.vocab_size
    tokens = cfg.micro_batch_tokens
    per_layer = 34 * tokens * hidden * compute_bytes / 2
    acts = (per_layer + layers * tokens * hidden * compute_bytes) if cfg.gradient_checkpointing else layers * per_layer
    items = {"parameters": total * param_bytes / shard, "gradients": trainable * param_bytes / shard,
             "optimizer (AdamW)": 2 * trainable * param_bytes / shard,
             "activations / micro-batch": acts + 3 * tokens * vocab * 4}
    if cfg.fsdp_cpu_offload and device.type == "cuda":
        items = {(f"{k} [host]" if k in ("parameters", "gradients", "optimizer (AdamW)") else k): v
                 for k, v in items.items()}
    if cfg.kl != "off" and not cfg.lora_rank:
        items["reference"] = total * param_bytes / shard
    if cfg.backend == "hf":
        items["rollout copy (hf)"] = total * compute_bytes
    if cfg.strategy == "fsdp2" and world_size > 1:
        items["fsdp2 gathered block"] = total / max(layers, 1) * compute_bytes
    del meta
    return MemoryPlan(items, capacity(cfg, device, local_ranks), str(device), f"{cfg.strategy}, world_size {world_size}")


def capacity(cfg: Any, device: Any, local_ranks: int) -> float:
    if cfg.memory_limit_gib:
        return cfg.memory_limit_gib * GIB
    if device.type == "cuda":
        import torch

        return float(torch.cuda.mem_get_info(device)[1])
    import os

    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return host / max(local_ranks, 1)  # the host's memory, shared by its ranks
