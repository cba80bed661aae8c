"""Broadcast turn advantages to action tokens under the loss mask.

Token order is episode, then turn, then `Turn.action_ids`. A token's advantage is its turn's
advantage times its `Turn.loss_mask` entry (all 1 when the mask is None) and times the turn's
`trained` flag where the estimator set one (TRACE's shared-prefix copies).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from agentgym.credit.errors import CreditInputError
from agentgym.credit.result import CreditResult
from agentgym.trajectory import Episode


@dataclass(frozen=True, eq=False)
class TokenAdvantages:
    """Flat per-token advantages. Shapes: `values`, `mask` [N tokens]; `turn_offsets` [T+1]."""

    values: np.ndarray  #: float64 advantage * mask
    mask: np.ndarray  #: int8 effective loss mask (Turn.loss_mask x trained)
    turn_offsets: np.ndarray  #: int64; turn t (flat, episode order) owns tokens turn_offsets[t]:[t+1]

    def per_turn(self) -> list[list[float]]:
        """One list of token advantages per flat turn."""
        vals, bounds = self.values.tolist(), self.turn_offsets.tolist()
        return [vals[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _flat_turn_advantages(episodes: Sequence[Episode], advantages: CreditResult | Sequence[Sequence[float]],
                          ) -> tuple[np.ndarray, np.ndarray | None]:
    if isinstance(advantages, CreditResult):
        return advantages.advantages, advantages.trained
    if len(advantages) != len(episodes):
        raise CreditInputError(f"got advantages for {len(advantages)} episodes but {len(episodes)} episodes; "
                               "pass the output of compute_advantages for these episodes.")
    for ep, row in zip(episodes, advantages, strict=True):
        if len(row) != len(ep.turns):
            raise CreditInputError(f"episode {ep.id} has {len(ep.turns)} turns but {len(row)} advantages; "
                                   "give one advantage per turn.")
    return np.fromiter((a for row in advantages for a in row), dtype=np.float64), None


def flat_token_advantages(episodes: Sequence[Episode], advantages: CreditResult | Sequence[Sequence[float]],
                          ) -> TokenAdvantages:
    """Per-token advantages and masks for `episodes`, flat (see `TokenAdvantages`)."""
    turns = [t for ep in episodes for t in ep.turns]
    turn_adv, trained = _flat_turn_advantages(episodes, advantages)
    counts = np.fromiter((len(t.action_ids) for t in turns), dtype=np.int64, count=len(turns))
    for t in turns:
        if t.loss_mask is not None and len(t.loss_mask) != len(t.action_ids):
            raise CreditInputError(f"turn {t.index} has {len(t.action_ids)} action tokens but a loss_mask of "
                                   f"{len(t.loss_mask)}; the collector must record one mask entry per token.")
    offsets = np.zeros(len(turns) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    mask = np.ones(int(offsets[-1]), dtype=np.int8)
    for t, start in zip(turns, offsets[:-1].tolist(), strict=True):
        if t.loss_mask is not None:
            mask[start:start + len(t.loss_mask)] = t.loss_mask
    if trained is not None:
        mask &= np.repeat(trained, counts).astype(np.int8)
    values = np.repeat(turn_adv, counts) * mask
    return TokenAdvantages(values=values, mask=mask, turn_offsets=offsets)


def token_advantages(episodes: Sequence[Episode], advantages: CreditResult | Sequence[Sequence[float]],
                     ) -> list[list[list[float]]]:
    """Per episode, per turn, one advantage per action token (0 where the loss mask is 0)."""
    flat = flat_token_advantages(episodes, advantages).per_turn()
    out, row = [], 0
    for ep in episodes:
        out.append(flat[row:row + len(ep.turns)])
        row += len(ep.turns)
    return out
