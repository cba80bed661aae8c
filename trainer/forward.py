"""One forward pass of a causal LM over a `TokenBatch`: per-token log-probs and entropy.

Log-probs are computed only where the loss mask is 1 (the action tokens), from
the logits one position earlier, divided by the sampling temperature so that
they are comparable with the engine's behavior log-probs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from agentgym.trainer.packing import TokenBatch, segment_rows

from agentgym.policy.shared_prefix import read_rows

#: read the segments of a sample through their common prefix once (CPU rows); False reads every row whole
#: (the reference, and a switch for benchmarks)
SHARE_PREFIX = True


@dataclass
class TokenOutputs:
    """Flat ``[T]`` tensors aligned with the batch (zeros off the loss mask)."""

    logprobs: torch.Tensor
    entropy: torch.Tensor | None
    hidden: torch.Tensor | None  #: [T, H] last hidden states, when asked for


def model_inputs(batch: TokenBatch) -> dict[str, Any]:
    """Keyword arguments for the model call (packed batches pass position ids and no mask)."""
    inputs: dict[str, Any] = {"input_ids": batch.input_ids, "position_ids": batch.position_ids, "use_cache": False}
    if batch.attention_mask is not None:
        inputs["attention_mask"] = batch.attention_mask
    return inputs


def segmented(batch: TokenBatch) -> bool:
    """Whether to run a packed batch as rows of its segments: off CUDA, where no fused variable-length attention
    kernel makes one long packed row cheap (`agentgym.trainer.packing.segment_rows`)."""
    return batch.attention_mask is None and batch.input_ids.device.type != "cuda"


def flat_forward(model: Any, batch: TokenBatch, pick: Any, **kwargs: Any) -> list[torch.Tensor]:
    """`pick(outputs)` -> ``[B, L, ...]`` tensors of one model call, returned flat (``[T, ...]``) in the batch's
    layout; a packed batch off CUDA runs as rows of its segments and is scattered back (the same numbers)."""
    if not segmented(batch):
        return [t.flatten(0, 1) for t in pick(model(**model_inputs(batch), **kwargs))]
    rows = segment_rows(batch)
    real = rows.attention_mask.bool()
    # the segments of one sample read their common prefix once (`agentgym.policy.shared_prefix`)
    picked = read_rows(model, pick, rows.input_ids, real, rows.row_sample, share=SHARE_PREFIX, **kwargs)
    flat = []
    for t in picked:
        full = t.new_zeros((batch.input_ids.numel(), *t.shape[2:]))
        flat.append(full.index_put((rows.flat_index,), t[real]))
    return flat


def token_logprobs(model: Any, batch: TokenBatch, *, temperature: float = 1.0, entropy: bool = False,
                   hidden: bool = False) -> TokenOutputs:
    """Log pi(token_j | prefix) at every masked position j, optionally with entropy and hidden states."""
    picked = flat_forward(model, batch, lambda o: [o.logits, *([o.hidden_states[-1]] if hidden else [])],
                          output_hidden_states=hidden)
    logits = picked[0]  # [T, V]
    ids = batch.input_ids.flatten()
    positions = torch.nonzero(batch.loss_mask > 0, as_tuple=False).flatten()
    if positions.numel() and int(positions.min()) == 0:
        raise ValueError("an action token sits at position 0 of the batch; every sample needs a prompt")
    rows = logits.index_select(0, positions - 1).float() / temperature
    logp_all = torch.log_softmax(rows, dim=-1)
    picked = logp_all.gather(1, ids.index_select(0, positions).unsqueeze(1)).squeeze(1)
    logprobs = torch.zeros(ids.shape[0], dtype=picked.dtype, device=picked.device).index_put((positions,), picked)
    ent = None
    if entropy:
        per_row = -(logp_all.exp() * logp_all).sum(-1)
        ent = torch.zeros_like(logprobs).index_put((positions,), per_row)
    h = picked[1] if hidden else None
    return TokenOutputs(logprobs, ent, h)
