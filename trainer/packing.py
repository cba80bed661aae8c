"""Episodes -> training sequences -> padding-free packed (or padded) token batches.

One episode is one sequence: for each turn its `prompt_ids` (system, history
glue and observation: loss mask 0) followed by its `action_ids` (exactly the
sampled ids: loss mask 1, or the turn's own `loss_mask`). Nothing is
re-tokenized. Packing concatenates sequences into one row whose position ids
restart at 0 for every sample; with no attention mask, transformers then builds
a block-diagonal causal mask, so no token attends across samples and no
compute is spent on padding.

A turn whose prompt a context window rendered afresh (``info["context"]["reset"]``,
see `agentgym.collector.window`) starts a new segment: position ids restart there,
so its tokens attend only to that prompt, exactly the context the model sampled in.

Per-token arrays are aligned with `input_ids`; the log-prob of token j is read
from the logits at j-1 (an action token is never a sequence's first token).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from agentgym.trajectory import Episode


@dataclass
class Sample:
    """One episode as one training sequence (lists aligned with `input_ids`)."""

    episode_id: str
    input_ids: list[int]
    loss_mask: list[int]  #: 1 on trained action tokens, 0 on prompt/observation tokens
    advantages: list[float]  #: per token (0 where the mask is 0)
    behavior_logprobs: list[float]  #: lp_beh from the engine (nan where the mask is 0 or none was recorded)
    versions: list[int]  #: policy version that sampled each token (-1 off the action tokens)
    turn_starts: list[int]  #: index of the first action token of each turn; values are read at start - 1
    turn_lengths: list[int] = field(default_factory=list)  #: number of action tokens of each turn
    turn_returns: list[float] = field(default_factory=list)  #: critic targets per turn (gae/spa), else empty
    weight: float = 1.0  #: sample weight from the data manager (staleness down-weighting)
    segment_starts: list[int] = field(default_factory=list)  #: where a context window started a new context

    def __len__(self) -> int:
        return len(self.input_ids)

    @property
    def num_action_tokens(self) -> int:
        return sum(self.loss_mask)


def episode_to_sample(episode: Episode, turn_advantages: Sequence[float], *, weight: float = 1.0,
                      turn_returns: Sequence[float] = ()) -> Sample:
    """The sequence of `episode` with each turn's advantage broadcast to its trained action tokens."""
    if len(turn_advantages) != len(episode.turns):
        raise ValueError(f"episode {episode.id} has {len(episode.turns)} turns but {len(turn_advantages)} "
                         "advantages were given: credit assignment must return one value per turn")
    ids: list[int] = []
    mask: list[int] = []
    adv: list[float] = []
    lp: list[float] = []
    ver: list[int] = []
    starts: list[int] = []
    lengths: list[int] = []
    segments: list[int] = []
    for turn, a in zip(episode.turns, turn_advantages, strict=True):
        if ids and (turn.info.get("context") or {}).get("reset"):
            segments.append(len(ids))  # the model saw only this turn's prompt from here: a new attention segment
        if not turn.prompt_ids and not ids:
            raise ValueError(f"episode {episode.id} turn {turn.index} has no prompt_ids: train on episodes "
                             "collected by a token-level policy backend (hf, vllm, openai), not a text policy")
        n_prompt, n_act = len(turn.prompt_ids), len(turn.action_ids)
        ids += turn.prompt_ids
        mask += [0] * n_prompt
        adv += [0.0] * n_prompt
        lp += [math.nan] * n_prompt
        ver += [-1] * n_prompt
        starts.append(len(ids))
        lengths.append(n_act)
        turn_mask = turn.loss_mask if turn.loss_mask is not None else [1] * n_act
        logprobs = turn.action_logprobs if len(turn.action_logprobs) == n_act else [math.nan] * n_act
        versions = turn.token_versions if len(turn.token_versions) == n_act else [
            episode.policy_version if episode.policy_version is not None else -1] * n_act
        ids += turn.action_ids
        mask += [int(bool(m)) for m in turn_mask]
        adv += [float(a) * bool(m) for m in turn_mask]
        lp += [float(x) for x in logprobs]
        ver += [int(v) for v in versions]
    return Sample(episode.id, ids, mask, adv, lp, ver, starts, lengths, list(turn_returns), weight, segments)


def positions(sample: Sample) -> torch.Tensor:
    """Position ids of one sample: 0.. from its start and again from every segment start (context window)."""
    pos = torch.arange(len(sample))
    for start in sample.segment_starts:
        pos[start:] -= pos[start].clone()
    return pos


@dataclass
class TokenBatch:
    """A batch laid out for one forward pass, with flat ``[T]`` views for the loss.

    Packed: `input_ids`/`position_ids` are ``[1, T]`` and `attention_mask` is None.
    Padded: ``[B, L]`` with an attention mask; the flat views are the row-major flattening.
    """

    input_ids: torch.Tensor
    position_ids: torch.Tensor
    attention_mask: torch.Tensor | None
    loss_mask: torch.Tensor  #: [T] float
    advantages: torch.Tensor  #: [T]
    behavior_logprobs: torch.Tensor  #: [T]
    token_weight: torch.Tensor  #: [T] the sample weight of each token
    sample_index: torch.Tensor  #: [T] long
    value_index: torch.Tensor  #: [K] flat positions where a turn's value is read
    value_sample: torch.Tensor  #: [K] sample of each value position
    value_targets: torch.Tensor  #: [K] turn returns (empty when no sample has them)
    num_samples: int
    episode_ids: list[str]
    offsets: list[int]  #: flat position of each sample's first token

    @property
    def num_tokens(self) -> int:
        return int(self.loss_mask.numel())

    def to(self, device: torch.device | str) -> TokenBatch:
        moved = {k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in self.__dict__.items()}
        return TokenBatch(**moved)


def _flat_fields(samples: Sequence[Sample], offsets: Sequence[int]) -> dict[str, torch.Tensor]:
    value_index, value_sample, targets = [], [], []
    for i, (s, off) in enumerate(zip(samples, offsets, strict=True)):
        value_index += [off + start - 1 for start in s.turn_starts]
        value_sample += [i] * len(s.turn_starts)
        if s.turn_returns:
            targets += list(s.turn_returns)
    return dict(value_index=torch.tensor(value_index, dtype=torch.long),
                value_sample=torch.tensor(value_sample, dtype=torch.long),
                value_targets=torch.tensor(targets, dtype=torch.float32))


def pack(samples: Sequence[Sample]) -> TokenBatch:
    """All `samples` in one row, position ids restarting per sample, no padding."""
    if not samples:
        raise ValueError("cannot pack an empty list of samples")
    offsets, total = [], 0
    for s in samples:
        offsets.append(total)
        total += len(s)
    cat = lambda name, dtype: torch.tensor([x for s in samples for x in getattr(s, name)], dtype=dtype)  # noqa: E731
    return TokenBatch(
        input_ids=cat("input_ids", torch.long).unsqueeze(0),
        position_ids=torch.cat([positions(s) for s in samples]).unsqueeze(0),
        attention_mask=None,
        loss_mask=cat("loss_mask", torch.float32),
        advantages=cat("advantages", torch.float32),
        behavior_logprobs=cat("behavior_logprobs", torch.float32),
        token_weight=torch.tensor([s.weight for s in samples for _ in s.input_ids], dtype=torch.float32),
        sample_index=torch.tensor([i for i, s in enumerate(samples) for _ in s.input_ids], dtype=torch.long),
        num_samples=len(samples), episode_ids=[s.episode_id for s in samples], offsets=offsets,
        **_flat_fields(samples, offsets))


def pad(samples: Sequence[Sample], pad_id: int) -> TokenBatch:
    """The classic layout: one right-padded row per sample (the reference for `pack`)."""
    if not samples:
        raise ValueError("cannot pad an empty list of samples")
    if any(s.segment_starts for s in samples):
        raise ValueError("episodes collected with a context window start new contexts mid-sequence, which only "
                         "packed batches express (position ids restart per segment); set packing: true")
    width = max(len(s) for s in samples)

    def grid(name: str, fill: float, dtype: torch.dtype) -> torch.Tensor:
        return torch.tensor([list(getattr(s, name)) + [fill] * (width - len(s)) for s in samples], dtype=dtype)

    lengths = [len(s) for s in samples]
    attn = torch.tensor([[1] * n + [0] * (width - n) for n in lengths], dtype=torch.long)
    return TokenBatch(
        input_ids=grid("input_ids", pad_id, torch.long),
        position_ids=(attn.cumsum(-1) - 1).clamp(min=0),
        attention_mask=attn,
        loss_mask=grid("loss_mask", 0, torch.float32).flatten(),
        advantages=grid("advantages", 0.0, torch.float32).flatten(),
        behavior_logprobs=grid("behavior_logprobs", math.nan, torch.float32).flatten(),
        token_weight=torch.tensor([[s.weight] * width for s in samples], dtype=torch.float32).flatten(),
        sample_index=torch.arange(len(samples)).repeat_interleave(width),
        num_samples=len(samples), episode_ids=[s.episode_id for s in samples],
        offsets=[i * width for i in range(len(samples))],
        **_flat_fields(samples, [i * width for i in range(len(samples))]))


@dataclass
class SegmentRows:
    """A packed batch's contexts as right-padded rows: how a CPU runs it (see `segment_rows`)."""

    input_ids: torch.Tensor  #: [S, L]
    position_ids: torch.Tensor  #: [S, L]
    attention_mask: torch.Tensor  #: [S, L] 1 on a segment's tokens
    flat_index: torch.Tensor  #: [N] the packed (flat) position of each real token, row-major over the grid
    row_sample: torch.Tensor  #: [S] the sample each row belongs to (its segments share a sample)


def segment_rows(batch: TokenBatch) -> SegmentRows:
    """Every context of a packed batch (a sample, or a context window's segment: where position ids restart)
    as its own right-padded row. Without a fused variable-length attention kernel (CPU), one packed row of T
    tokens costs a T x T mask and T x T attention; rows of the segments cost the sum of their squares."""
    pos = batch.position_ids.flatten()
    starts = torch.nonzero(pos == 0, as_tuple=False).flatten()
    lengths = torch.diff(starts, append=torch.tensor([pos.numel()], device=pos.device))
    steps = torch.arange(int(lengths.max()), device=pos.device)
    real = steps.unsqueeze(0) < lengths.unsqueeze(1)
    grid = torch.where(real, starts.unsqueeze(1) + steps.unsqueeze(0), torch.zeros_like(real, dtype=torch.long))
    return SegmentRows(input_ids=batch.input_ids.flatten()[grid], position_ids=pos[grid] * real,
                       attention_mask=real.long(), flat_index=grid[real], row_sample=batch.sample_index[starts])


def collate(samples: Sequence[Sample], *, packed: bool, pad_id: int) -> TokenBatch:
    """`pack` or `pad`, by layout."""
    return pack(samples) if packed else pad(samples, pad_id)


def micro_batches(samples: Sequence[Sample], max_tokens: int) -> list[list[Sample]]:
    """Split into consecutive groups of at most `max_tokens` tokens (a longer sample goes alone).

    For the padded layout pass samples sorted by length, so rows of one group waste little padding.
    """
    groups: list[list[Sample]] = []
    current: list[Sample] = []
    size = 0
    for s in samples:
        if current and size + len(s) > max_tokens:
            groups.append(current)
            current, size = [], 0
        current.append(s)
        size += len(s)
    if current:
        groups.append(current)
    return groups
