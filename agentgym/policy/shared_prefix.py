"""Run the contexts of one episode once through their common prefix, then each on its own (CPU rows).

Under a context window (`keep_turns`), every turn of an episode is a fresh context that begins with the same
tokens: the system prompt, the task's first message and whatever the window keeps in front. On KeyDoor-v0's
recipe (`keep_turns: 0`) a turn's context is about 225 tokens of which the first 140 are the same in every turn
of the episode, so reading the turns as separate rows computes those 140 tokens some 25 times.

`shared_prefix_forward` reads each group of rows (the segments of one sample; else the samples that begin alike,
as the rollouts of one task do) as one prefix row, cached, and the rows' remainders as suffix rows that attend to
the cached prefix (a `transformers` key/value cache selected per row): the same attention and the same numbers up
to float rounding, with the prefix's projections and MLPs paid once per group. Outputs come back as `[R, L, ...]`
tensors laid out like the rows, so callers see no difference; gradients flow into the prefix through the cache
and the prefix's own outputs. The outputs are gathered from the prefix and suffix rows' outputs, so at its peak
a call holds them about twice (what a vocabulary-sized logits tensor costs matters for large models on CPU).

It applies where it pays and is safe: the model runs in one process (a module wrapped for data parallelism
must see exactly one forward per backward), no gradient checkpointing (which turns the cache off), and the
groups share at least `min_prefix` tokens; otherwise the rows run as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from agentgym.policy.models import cache_keyword, output_cache

MIN_PREFIX = 32  #: shorter common prefixes are not worth a second model call


@dataclass(frozen=True)
class PrefixPlan:
    """Which rows share which prefix: `length[g]` tokens of group g, `group[r]` (-1: row r runs alone)."""

    group: torch.Tensor  #: [R] group of each row, -1 for rows that share nothing
    first_row: torch.Tensor  #: [G] a row of each group (its prefix tokens are the group's)
    length: torch.Tensor  #: [G] the shared prefix length of each group (>= min_prefix, < every member's length)


def plan_prefixes(ids: torch.Tensor, lengths: torch.Tensor, key: torch.Tensor, min_prefix: int = MIN_PREFIX
                  ) -> PrefixPlan | None:
    """Group the rows of `ids` [R, L] (real tokens `lengths` [R]) by `key` [R] (the sample each row belongs to)
    and find each group's longest common prefix, capped one token short of its shortest row so that every row
    keeps a suffix. Rows that share nothing within their sample (a sample read as one context) are then grouped
    by their first `min_prefix` tokens: the rollouts of one task begin with the same prompt. None when no group
    of two or more rows shares `min_prefix` tokens."""
    group = torch.full((ids.shape[0],), -1, dtype=torch.long)
    firsts: list[int] = []
    sizes: list[int] = []

    def take(rows: torch.Tensor) -> None:
        if rows.numel() < 2:
            return
        cap = int(lengths[rows].min()) - 1
        if cap < min_prefix:
            return
        same = (ids[rows, :cap] == ids[rows[0], :cap]).all(dim=0)
        n = cap if bool(same.all()) else int(torch.nonzero(~same, as_tuple=False)[0])
        if n >= min_prefix:
            group[rows] = len(firsts)
            firsts.append(int(rows[0]))
            sizes.append(n)

    for k in torch.unique(key).tolist():
        take(torch.nonzero(key == k, as_tuple=False).flatten())
    heads: dict[tuple[int, ...], list[int]] = {}
    for r in torch.nonzero((group < 0) & (lengths > min_prefix), as_tuple=False).flatten().tolist():
        heads.setdefault(tuple(ids[r, :min_prefix].tolist()), []).append(r)
    for rows in heads.values():
        take(torch.tensor(rows, dtype=torch.long))
    if not firsts:
        return None
    return PrefixPlan(group, torch.tensor(firsts, dtype=torch.long), torch.tensor(sizes, dtype=torch.long))


def can_share(model: Any) -> bool:
    """Whether `model` may be called twice for one backward: not wrapped for data parallelism (DDP, FSDP)
    and without gradient checkpointing (which disables the key/value cache)."""
    if isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return False
    fsdp = getattr(torch.distributed, "fsdp", None)
    for name in ("FSDPModule", "FullyShardedDataParallel"):
        cls = getattr(fsdp, name, None) if fsdp is not None else None
        if cls is not None and any(isinstance(m, cls) for m in model.modules()):
            return False
    # transformers 5 renamed the flag (the old name warns); a PEFT wrapper answers for its base model
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):
        if hasattr(type(model), name) or name in vars(model):
            return not getattr(model, name)
    base = model.get_base_model() if hasattr(model, "get_base_model") else None
    return can_share(base) if base is not None and base is not model else True


def read_rows(model: Any, pick: Callable[[Any], list[torch.Tensor]], ids: torch.Tensor, real: torch.Tensor,
              key: torch.Tensor, *, share: bool = True, **kwargs: Any) -> list[torch.Tensor]:
    """`pick(model(...))` over right-padded rows `ids` [R, L] (real tokens where `real`) as `[R, L, ...]` tensors.
    The rows of one sample (`key` [R]), or samples that begin alike, read their common prefix once when `share`
    and `can_share(model)` allow; otherwise every row is read whole. `kwargs` go to every model call."""
    def call(**inputs: Any) -> Any:
        return model(**inputs, **kwargs)

    plan = plan_prefixes(ids, real.sum(dim=1).cpu(), key.cpu()) if share and can_share(model) else None
    if plan is None:
        return _whole(call, pick, ids, real)
    return shared_prefix_forward(call, pick, ids, real, plan, cache_keyword(model))


def _right_padded(ids: torch.Tensor, starts: torch.Tensor, counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows `ids[i, starts[i] : starts[i] + counts[i]]` right-padded (with 0) to the longest: (grid, real mask)."""
    width = int(counts.max())
    steps = torch.arange(width, device=ids.device)
    real = steps.unsqueeze(0) < counts.unsqueeze(1)
    cols = torch.where(real, starts.unsqueeze(1) + steps.unsqueeze(0), torch.zeros_like(steps).unsqueeze(0))
    return torch.where(real, ids.gather(1, cols), torch.zeros_like(cols)), real


def shared_prefix_forward(call: Callable[..., Any], pick: Callable[[Any], list[torch.Tensor]], ids: torch.Tensor,
                          real: torch.Tensor, plan: PrefixPlan, cache_arg: str = "past_key_values"
                          ) -> list[torch.Tensor]:
    """`pick(outputs)` of `call(input_ids=, position_ids=, attention_mask=, ...)` for right-padded rows `ids`
    [R, L] (real tokens where `real`), with the rows of each group of `plan` reading their common prefix from
    one cached prefix row (passed back by the keyword `cache_arg`, see `agentgym.policy.models.cache_keyword`).
    Returns `[R, L, ...]` tensors (padding positions read zeros)."""
    device = ids.device
    lengths = real.sum(dim=1)
    group = plan.group.to(device)
    shared = torch.nonzero(group >= 0, as_tuple=False).flatten()
    alone = torch.nonzero(group < 0, as_tuple=False).flatten()
    prefix_len = plan.length.to(device)

    # the prefix rows, one per group, kept in a key/value cache
    p_ids, p_real = _right_padded(ids.index_select(0, plan.first_row.to(device)),
                                  torch.zeros_like(prefix_len), prefix_len)
    p_pos = torch.arange(p_ids.shape[1], device=device).expand_as(p_ids) * p_real
    prefix_out = call(input_ids=p_ids, position_ids=p_pos, attention_mask=p_real.long(), use_cache=True)
    cache = output_cache(prefix_out)
    if cache is None:  # the model kept no cache (gradient checkpointing): read every row whole
        return _whole(call, pick, ids, real)
    prefix_picked = pick(prefix_out)

    # each shared row's remainder, attending to its group's cached prefix (positions go on from the prefix)
    own = group.index_select(0, shared)
    start = prefix_len.index_select(0, own)
    s_ids, s_real = _right_padded(ids.index_select(0, shared), start, lengths.index_select(0, shared) - start)
    s_pos = (start.unsqueeze(1) + torch.arange(s_ids.shape[1], device=device).unsqueeze(0)) * s_real
    cache.batch_select_indices(own)
    mask = torch.cat([p_real.index_select(0, own), s_real], dim=1).long()
    suffix_picked = pick(call(input_ids=s_ids, position_ids=s_pos, attention_mask=mask, use_cache=True,
                              **{cache_arg: cache}))
    alone_picked = None
    if alone.numel():
        alone_picked = _whole(call, pick, ids.index_select(0, alone), real.index_select(0, alone))

    # one gather lays every row out again: [row, q] reads the prefix row below the prefix, else the suffix row
    n_rows, width = ids.shape
    p_w, s_w = p_ids.shape[1], s_ids.shape[1]
    q = torch.arange(width, device=device).unsqueeze(0)
    index = torch.full((n_rows, width), -1, dtype=torch.long, device=device)
    s_offset = p_ids.shape[0] * p_w
    in_prefix = q < start.unsqueeze(1)
    index[shared] = torch.where(in_prefix, own.unsqueeze(1) * p_w + q,
                                s_offset + torch.arange(len(shared), device=device).unsqueeze(1) * s_w
                                + (q - start.unsqueeze(1)).clamp(min=0, max=s_w - 1))
    a_offset = s_offset + s_ids.shape[0] * s_w
    if alone.numel():
        index[alone] = a_offset + torch.arange(len(alone), device=device).unsqueeze(1) * width + q
    index = torch.where(real, index, torch.full_like(index, -1))
    out = []
    for k, p_t in enumerate(prefix_picked):
        parts = [p_t.flatten(0, 1), suffix_picked[k].flatten(0, 1)]
        if alone_picked is not None:
            parts.append(alone_picked[k].flatten(0, 1))
        parts.append(p_t.new_zeros((1, *p_t.shape[2:])))
        flat = torch.cat(parts)
        out.append(flat[torch.where(index < 0, torch.full_like(index, flat.shape[0] - 1), index)])
    return out


def _whole(call: Callable[..., Any], pick: Callable[[Any], list[torch.Tensor]], ids: torch.Tensor,
           real: torch.Tensor) -> list[torch.Tensor]:
    """Every right-padded row read on its own (positions from 0, padding masked)."""
    positions = (real.long().cumsum(dim=1) - 1).clamp(min=0) * real
    return pick(call(input_ids=ids, position_ids=positions, attention_mask=real.long(), use_cache=False))
