"""Batched token sampling with per-row settings, and the log-probs the collector records.

Rows of one batch may have different temperatures, top-k, top-p and seeds.
The recorded log-prob follows `agentgym.policy.base.LOGPROB_CONVENTION`:
``log_softmax(logits / temperature)`` over the full vocabulary, taken before
top-k/top-p truncation (greedy rows use temperature 1).

Requires torch (the `train` extra); imported only by backends that sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from agentgym.policy.base import SamplingParams


@dataclass
class RowSampler:
    """The sampling state of one row: its params and its random generator."""

    params: SamplingParams
    generator: torch.Generator | None  #: None: draw from the backend's shared generator


def make_generator(seed: int | None, device: Any) -> torch.Generator | None:
    """A generator seeded with `seed` on `device`, or None to use the shared one."""
    if seed is None:
        return None
    gen = torch.Generator(device=device)
    gen.manual_seed(int(seed) % (2**63))
    return gen


def sample_rows(logits: torch.Tensor, rows: Sequence[RowSampler],
                shared: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row of `logits` [B, V]; returns (token ids [B], log-probs [B]) as float32 math."""
    logits = logits.float()
    temps = torch.tensor([r.params.temperature for r in rows], device=logits.device, dtype=torch.float32)
    greedy = temps == 0
    scaled = logits / torch.where(greedy, torch.ones_like(temps), temps).unsqueeze(1)
    logp = torch.log_softmax(scaled, dim=-1)
    processed = _truncate(scaled, rows)
    probs = torch.softmax(processed, dim=-1)
    uniforms = _uniforms(rows, shared, logits.device)
    cdf = probs.cumsum(dim=-1)
    cdf[:, -1] = 1.0  # guard against rounding
    sampled = torch.searchsorted(cdf, uniforms.unsqueeze(1)).squeeze(1).clamp_(max=logits.shape[-1] - 1)
    # searchsorted can land on a zero-probability token where the cdf is flat; step back to a kept one
    picked_prob = probs.gather(1, sampled.unsqueeze(1)).squeeze(1)
    if bool((picked_prob == 0).any()):
        fallback = processed.argmax(dim=-1)
        sampled = torch.where(picked_prob == 0, fallback, sampled)
    tokens = torch.where(greedy, logits.argmax(dim=-1), sampled)
    return tokens, logp.gather(1, tokens.unsqueeze(1)).squeeze(1)


def _truncate(scaled: torch.Tensor, rows: Sequence[RowSampler]) -> torch.Tensor:
    """Logits with tokens outside each row's top-k / top-p set at -inf."""
    top_k = [r.params.top_k for r in rows]
    top_p = [r.params.top_p for r in rows]
    if not any(top_k) and all(p >= 1.0 for p in top_p):
        return scaled
    vocab = scaled.shape[-1]
    sorted_logits, order = scaled.sort(dim=-1, descending=True)
    ks = torch.tensor([k if 0 < k < vocab else vocab for k in top_k], device=scaled.device)
    ranks = torch.arange(vocab, device=scaled.device).unsqueeze(0)
    drop = ranks >= ks.unsqueeze(1)
    sorted_probs = torch.softmax(sorted_logits.masked_fill(drop, float("-inf")), dim=-1)
    ps = torch.tensor(top_p, device=scaled.device, dtype=torch.float32).unsqueeze(1)
    before = sorted_probs.cumsum(dim=-1) - sorted_probs  # mass of strictly more likely tokens
    drop |= before >= ps  # keeps the smallest prefix whose mass reaches p (always at least one token)
    masked_sorted = sorted_logits.masked_fill(drop, float("-inf"))
    return torch.full_like(scaled, float("-inf")).scatter(1, order, masked_sorted)


def _uniforms(rows: Sequence[RowSampler], shared: torch.Generator, device: Any) -> torch.Tensor:
    """One U(0,1) draw per row, from the row's own generator when it has one."""
    out = torch.rand(len(rows), generator=shared, device=device)
    for i, row in enumerate(rows):
        if row.generator is not None:
            out[i] = torch.rand(1, generator=row.generator, device=device)[0]
    return out
