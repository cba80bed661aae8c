"""Build the policy the trainer updates: model + tokenizer (tiny, local directory or hub name), dtype,
device, LoRA through PEFT, gradient checkpointing, optimizer and learning-rate schedule.

Every model loads through `agentgym.policy.models.load_model`, so a GPU recipe naming
a hub model takes the same path as the tiny local one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from agentgym.policy.models import TinyModelSpec, load_model, tiny_model_dir


@dataclass
class ModelSpec:
    """Explicit arguments of `build_model` (the run config maps onto them)."""

    name: str = "tiny"  #: 'tiny', a local directory or a hub name
    tiny: TinyModelSpec = TinyModelSpec()
    dtype: str = "auto"  #: auto | float32 | bfloat16
    device: str = "auto"  #: auto | cpu | cuda
    gradient_checkpointing: bool = False
    lora_rank: int = 0
    lora_alpha: float = 16.0
    lora_dropout: float = 0.0
    lora_target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ValueError("device: cuda was asked for but torch sees no GPU; use device: auto or cpu")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """bfloat16 where the device has it (auto on a GPU with bf16), float32 otherwise."""
    if dtype == "float32":
        return torch.float32
    if dtype == "bfloat16":
        return torch.bfloat16
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def model_path(spec: ModelSpec) -> str:
    """The directory (or hub name) `load_model` gets."""
    return str(tiny_model_dir(spec.tiny)) if spec.name == "tiny" else spec.name


def build_model(spec: ModelSpec) -> tuple[Any, Any]:
    """(model in train mode on its device, tokenizer); LoRA-wrapped when lora_rank > 0."""
    device = resolve_device(spec.device)
    model, tokenizer = load_model(model_path(spec), dtype=resolve_dtype(spec.dtype, device), device=str(device))
    if spec.gradient_checkpointing:
        # transformers 5 renamed it (the old name warns and goes in v6)
        (getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable)()
        model.config.use_cache = False
    if spec.lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=spec.lora_rank, lora_alpha=spec.lora_alpha, lora_dropout=spec.lora_dropout,
                          target_modules=list(spec.lora_target_modules), task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
        if spec.gradient_checkpointing:
            model.enable_input_require_grads()
    model.train()
    return model, tokenizer


def is_lora(model: Any) -> bool:
    return hasattr(model, "peft_config")


def merged_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """Full weights in the base model's key names (LoRA deltas merged in), for the rollout backend.

    A sharded (fsdp2) policy gathers them through its strategy, with every rank taking part.
    """
    gather = getattr(model, "agentgym_full_state", None)
    if gather is not None:
        return gather()
    if not is_lora(model):
        return {k: v.detach() for k, v in model.state_dict().items()}
    base = model.get_base_model()
    merged: dict[str, torch.Tensor] = {}
    for name, module in base.named_modules():
        if hasattr(module, "base_layer") and hasattr(module, "get_delta_weight"):
            delta = sum(module.get_delta_weight(a) for a in module.active_adapters if a in module.lora_A)
            merged[f"{name}.weight"] = (module.base_layer.weight + delta).detach()
    for key, value in base.state_dict().items():
        if "lora_" in key:
            continue
        clean = key.replace(".base_layer.", ".")
        merged.setdefault(clean, value.detach())
    return merged


def lora_adapter_state(model: Any) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """Only the LoRA adapter, for a rollout engine that holds the base weights: tensors named
    ``<base weight key>@lora_A`` / ``@lora_B`` and each module's scaling (``W = W_base + scaling * B @ A``).

    A sharded (fsdp2) policy gathers the adapter through its strategy, with every rank taking part."""
    gather = getattr(model, "agentgym_adapter_state", None)
    return gather() if gather is not None else adapter_state(model)


def adapter_state(model: Any) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """`lora_adapter_state` of this process's model; an fsdp2 shard is gathered whole (a collective per tensor:
    every rank calls this, in the same module order)."""
    tensors: dict[str, torch.Tensor] = {}
    scaling: dict[str, float] = {}
    for name, module in model.get_base_model().named_modules():
        if not (hasattr(module, "base_layer") and hasattr(module, "lora_A")):
            continue
        for adapter in module.active_adapters:
            if adapter not in module.lora_A:
                continue
            if getattr(module, "fan_in_fan_out", False):
                raise ValueError(f"{name}: fan_in_fan_out LoRA layers are not supported by adapter-only sync")
            key = f"{name}.weight"
            tensors[f"{key}@lora_A"] = _whole(module.lora_A[adapter].weight)
            tensors[f"{key}@lora_B"] = _whole(module.lora_B[adapter].weight)
            scaling[key] = float(module.scaling[adapter])
    return tensors, scaling


def merge_lora_state(model: Any, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A LoRA model's own state dict (PEFT's key names, as gathered from fsdp2 shards or a ddp replica) as the
    full weights in the base model's key names, each adapted weight merged: ``W + scaling * B @ A``.
    An empty `state` (a follower's share of a gather) gives an empty dict."""
    prefix = "base_model.model."
    merged = {k.removeprefix(prefix).replace(".base_layer.", "."): v for k, v in state.items() if "lora_" not in k}
    for name, module in model.get_base_model().named_modules():
        if not (hasattr(module, "base_layer") and hasattr(module, "lora_A")):
            continue
        for adapter in module.active_adapters:
            a, b = state.get(f"{prefix}{name}.lora_A.{adapter}.weight"), state.get(f"{prefix}{name}.lora_B.{adapter}.weight")
            if a is None or b is None:
                continue
            w = merged[f"{name}.weight"]
            merged[f"{name}.weight"] = torch.addmm(w, b.to(w.dtype), a.to(w.dtype), alpha=float(module.scaling[adapter]))
    return merged


def _whole(t: torch.Tensor) -> torch.Tensor:
    """`t` detached, gathered whole when it is an fsdp2 shard (a DTensor)."""
    full = getattr(t, "full_tensor", None)
    return (full() if full is not None else t).detach()


def trainable_parameters(model: Any) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def build_optimizer(params: list[torch.nn.Parameter], lr: float, weight_decay: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, betas=(0.9, 0.999), eps=1e-8)


def build_scheduler(optimizer: torch.optim.Optimizer, *, warmup: int, total: int,
                    schedule: str) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over `warmup` steps, then constant, cosine or linear decay to 0 at `total`."""

    def factor(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant" or total <= warmup:
            return 1.0
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return 0.5 * (1 + math.cos(math.pi * progress)) if schedule == "cosine" else 1.0 - progress

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)
