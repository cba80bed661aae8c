"""Shared plumbing of the learned credit models: backbone loading, token packing, hidden states.

An episode's token sequence is the concatenation, turn by turn, of `Turn.prompt_ids` (the
context tokens new this turn) and `Turn.action_ids` (the sampled tokens), exactly as recorded by
the collector; nothing is re-tokenized. A turn whose prompt a context window rendered afresh
(``info["context"]["reset"]``, `agentgym.collector.window`) starts a new attention segment, as in the
trainer's packing: its tokens are read in exactly the context the policy sampled them in, so OPRL's
`lp_phi - lp_old` compares log-probs of one context, and a 30-turn episode under `keep_turns: 0` costs
30 short forward rows instead of one long one. Requires the `train` extra.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.credit.errors import CreditInputError
from agentgym.errors import require
from agentgym.trajectory import Episode

torch = require("torch", extra="train", what="agentgym.credit.learned")

from agentgym.policy.shared_prefix import read_rows  # noqa: E402


def load_backbone(backbone: str | os.PathLike[str] | Any, *, dtype: Any = None, device: str | None = None) -> Any:
    """A causal LM from a local directory / hub name (through `agentgym.policy.models.load_model`) or as given."""
    if isinstance(backbone, (str, os.PathLike)):
        from agentgym.policy.models import load_model

        model, _ = load_model(backbone, dtype=dtype, device=device)
        return model
    if device is not None:
        backbone.to(device)
    return backbone


@dataclass(frozen=True)
class Packed:
    """One episode's token sequence and where its turns and action tokens sit in it."""

    ids: list[int]  #: the full sequence
    turn_ends: list[int]  #: per turn, the position of its last token
    action_pos: list[list[int]]  #: per turn, the positions of its action tokens
    segment_starts: tuple[int, ...] = ()  #: where a context window began a new context (attention restarts)

    def spans(self) -> list[tuple[int, int]]:
        """[start, end) of each attention segment."""
        bounds = [0, *self.segment_starts, len(self.ids)]
        return list(zip(bounds[:-1], bounds[1:], strict=True))


def pack_episode(ep: Episode, max_tokens: int) -> Packed:
    """Concatenate prompt and action ids turn by turn (raises if a turn has no tokens or it is too long)."""
    ids: list[int] = []
    ends, actions, segments = [], [], []
    for turn in ep.turns:
        if ids and ((turn.info or {}).get("context") or {}).get("reset"):
            if not turn.prompt_ids:
                raise CreditInputError(f"episode {ep.id} turn {turn.index} starts a new context (a context "
                                       "window reset) but has no prompt_ids; record the rendered prompt.")
            segments.append(len(ids))
        ids.extend(turn.prompt_ids)
        start = len(ids)
        ids.extend(turn.action_ids)
        if not ids:
            raise CreditInputError(f"episode {ep.id} turn {turn.index} has no prompt_ids or action_ids; the "
                                   "learned credit models read the recorded token ids of every turn.")
        ends.append(len(ids) - 1)
        actions.append(list(range(start, len(ids))))
    if len(ids) > max_tokens:
        raise CreditInputError(f"episode {ep.id} has {len(ids)} tokens, more than max_tokens={max_tokens}; raise "
                               "max_tokens or drop over-long episodes before the update.")
    return Packed(ids, ends, actions, tuple(segments))


def hidden_states(model: Any, packed: Sequence[Packed], pad_id: int = 0) -> tuple[Any, Any]:
    """Last hidden states [B, L, H] of right-padded sequences, and the device they are on.

    Each attention segment runs as its own row (positions from 0, no attention to earlier segments), the
    segments of one episode reading their common prefix once (`agentgym.policy.shared_prefix`); the rows are
    joined back so that `[b, q]` is episode b's token q whatever its segment.
    """
    device = next(model.parameters()).device
    rows = [(b, start, end) for b, p in enumerate(packed) for start, end in p.spans()]
    width = max((end - start for _, start, end in rows), default=1)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros((len(rows), width), dtype=torch.long, device=device)
    for row, (b, start, end) in enumerate(rows):
        ids[row, : end - start] = torch.tensor(packed[b].ids[start:end], dtype=torch.long, device=device)
        mask[row, : end - start] = 1
    # an episode's segments read their common prefix once (`agentgym.policy.shared_prefix`)
    hidden = read_rows(model.base_model, lambda o: [o.last_hidden_state], ids, mask.bool(),
                       torch.tensor([b for b, _, _ in rows]))[0]
    if len(rows) == len(packed):
        return hidden, device  # one segment per episode: the rows are the episodes
    # One gather joins every row back; slicing row by row would give each slice a backward pass that
    # allocates and adds a tensor the size of `hidden` (quadratic in the rows: 30 segments per episode
    # under `keep_turns: 0` made that most of an update). Padding positions read an appended zero row.
    flat = torch.cat([hidden.reshape(-1, hidden.shape[-1]), hidden.new_zeros((1, hidden.shape[-1]))])
    index = torch.full((len(packed), max(len(p.ids) for p in packed)), flat.shape[0] - 1, dtype=torch.long)
    for row, (b, start, end) in enumerate(rows):
        index[b, start:end] = torch.arange(row * width, row * width + end - start)
    return flat[index.to(device)], device


def gather_rows(hidden: Any, positions: Sequence[Sequence[int]]) -> Any:
    """hidden[b, positions[b]] for every row b, concatenated: [sum of lengths, H] (one gather, for the same
    reason as in `hidden_states`)."""
    rows = torch.repeat_interleave(torch.arange(len(positions)), torch.tensor([len(pos) for pos in positions],
                                                                            dtype=torch.long))
    cols = torch.as_tensor([q for pos in positions for q in pos], dtype=torch.long)
    return hidden[rows.to(hidden.device), cols.to(hidden.device)]


@dataclass(frozen=True)
class CreditModelStats:
    """What one `update(batch)` did."""

    loss: float  #: the objective before the step
    grad_norm: float  #: gradient norm before clipping
    n_examples: int  #: episodes (SPA) or pairs (OPRL) used
    skipped: bool = False  #: no step was taken (no usable data)
    step: int = 0  #: optimizer steps taken so far
    lr: float = 0.0  #: learning rate used for this step


def warmup_factor(step: int, warmup_steps: int) -> float:
    """Linear warm-up multiplier for optimizer step `step` (1-based)."""
    return 1.0 if warmup_steps <= 0 else min(1.0, step / warmup_steps)


def make_optimizer(params: Any, lr: float, weight_decay: float) -> Any:
    return torch.optim.AdamW([p for p in params if p.requires_grad], lr=lr, weight_decay=weight_decay)


def zero_head(in_features: int, like: Any) -> Any:
    """A `Linear(in_features, 1)` with zero weight and bias on `like`'s device and dtype (untrained: outputs 0)."""
    head = torch.nn.Linear(in_features, 1).to(like.device, like.dtype)
    torch.nn.init.zeros_(head.weight)
    torch.nn.init.zeros_(head.bias)
    return head


def no_grad_batches(model: Any, items: Sequence[Any], size: int, run: Callable[[list[Any]], Any]) -> list[Any]:
    """`run` over micro-batches of `size` items with `model` in eval mode and no gradient; the results joined."""
    model.eval()
    out: list[Any] = []
    with torch.no_grad():
        for i in range(0, len(items), size):
            out.extend(run(list(items[i:i + size])))
    return out


def accumulate_gradients(model: Any, optimizer: Any, items: Sequence[Any], size: int,
                         loss_of: Callable[[list[Any]], Any]) -> float:
    """Zero the gradients, then back-propagate each micro-batch's loss weighted by its share of `items`.

    The gradient equals that of the mean loss over all `items` in one batch; returns that loss.
    The caller clips and steps.
    """
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total = 0.0
    for i in range(0, len(items), size):
        chunk = list(items[i:i + size])
        loss = loss_of(chunk) * (len(chunk) / len(items))
        loss.backward()
        total += float(loss.detach())
    return total
