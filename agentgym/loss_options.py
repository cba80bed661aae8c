"""The policy loss's options and their rules, torch-free, shared by the run config and the trainer.

`agentgym.config.TrainConfig` checks a run's values before any work starts and
`agentgym.trainer.loss.LossConfig` checks them again where the loss is built;
both call `check_loss_options`, so a rule (dual clip above 1, the importance
cap above its floor, ...) is written once. docs/algorithms.md explains each option.
"""

from __future__ import annotations

from typing import Literal, get_args

Aggregation = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm"]
KLKind = Literal["off", "k1", "k2", "k3"]
ISMode = Literal["off", "tis", "icepop", "mask"]

AGGREGATIONS: tuple[str, ...] = get_args(Aggregation)
KL_KINDS: tuple[str, ...] = get_args(KLKind)
IS_MODES: tuple[str, ...] = get_args(ISMode)


def check_loss_options(*, clip_low: float, clip_high: float, dual_clip: float | None, aggregation: str, kl: str,
                       importance: str, is_low: float, is_cap: float) -> None:
    """Raise `ValueError` naming the value, the rule and the fix for the first option that breaks a rule."""
    for name, value, allowed in (("aggregation", aggregation, AGGREGATIONS), ("kl", kl, KL_KINDS),
                                 ("importance", importance, IS_MODES)):
        if value not in allowed:
            raise ValueError(f"{name} {value!r} is not one of {', '.join(allowed)}")
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (verl uses 3.0), got {dual_clip}; or null to turn it off")
    if not (0.0 <= clip_low < 1.0 and clip_high >= 0.0):
        raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {clip_low}, {clip_high}")
    if is_cap <= is_low:
        raise ValueError(f"is_cap ({is_cap}) must be above is_low ({is_low})")
