"""Token-level policy-gradient losses (docs/algorithms.md, section 3).

Every function works on *flat* token tensors of shape ``[T]`` together with
``sample_index`` (``[T]``, long: which sample each token belongs to) and a
``mask`` (``[T]``, 1 on the agent's own action tokens, 0 on prompt and
observation tokens). A padded ``[B, L]`` batch flattens into the same form
(``sample_index`` = row), so packed and padded batches share one code path.

Four log-prob sources per action token (docs/algorithms.md, section 1):
``lp_beh`` (behavior, from the inference engine), ``lp_old`` (proximal,
recomputed by the trainer before the update), ``lp_cur`` (current, with
gradient) and ``lp_ref`` (frozen reference, KL only).

    w     = IS weight from exp(lp_old - lp_beh)       (off | tis | icepop | mask)
    rho   = exp(lp_cur - lp_old)
    l_tok = w * -min(rho*A, clip(rho, 1-eps_lo, 1+eps_hi)*A)   [dual clip for A < 0]
    loss  = agg(l_tok) + kl_coef * agg(kl(lp_cur, lp_ref)) - entropy_coef * agg(entropy)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentgym.loss_options import (
    AGGREGATIONS,
    IS_MODES,
    KL_KINDS,
    Aggregation,
    ISMode,
    KLKind,
    check_loss_options,
)


@dataclass(frozen=True)
class LossConfig:
    """Knobs of the policy loss; each has the meaning it has in verl / slime / AReaL."""

    clip_low: float = 0.2  #: eps_lo: rho is clipped below at 1 - clip_low
    clip_high: float = 0.2  #: eps_hi: rho is clipped above at 1 + clip_high ("clip higher": 0.28)
    dual_clip: float | None = None  #: c > 1: for A < 0 the token loss is capped at -c*A (verl: 3.0)
    aggregation: Aggregation = "token-mean"  #: how token losses become one number
    max_length: int | None = None  #: L_max for seq-mean-token-sum-norm (default: the longest masked sample)
    kl: KLKind = "off"  #: KL estimator to the reference policy, in the loss
    kl_coef: float = 0.0  #: beta: weight of the KL term
    entropy_coef: float = 0.0  #: weight of the entropy bonus (subtracted from the loss)
    importance: ISMode = "off"  #: behavior-vs-proximal correction for stale or mismatched tokens
    is_low: float = 0.0  #: lower bound of the IS weight (tis: clamp; icepop: zero below)
    is_cap: float = 2.0  #: C: upper bound of the IS weight (tis: clamp; icepop/mask: drop above)

    def __post_init__(self) -> None:
        check_loss_options(clip_low=self.clip_low, clip_high=self.clip_high, dual_clip=self.dual_clip,
                           aggregation=self.aggregation, kl=self.kl, importance=self.importance,
                           is_low=self.is_low, is_cap=self.is_cap)


@dataclass
class LossOutput:
    """The differentiable loss and detached statistics of one micro-batch."""

    loss: torch.Tensor  #: scalar to backpropagate
    policy_loss: float  #: aggregated clipped surrogate (with IS weights)
    kl: float  #: aggregated KL estimate (0 when kl is off)
    entropy: float  #: aggregated token entropy (nan when not given)
    clip_fraction: float  #: share of masked tokens whose ratio was clipped
    is_weight_mean: float  #: mean IS weight over masked tokens (1 when off)
    is_dropped_fraction: float  #: share of masked tokens removed by icepop/mask
    num_tokens: int  #: masked tokens in this micro-batch


# ---- aggregation -------------------------------------------------------------------------------

def aggregate(values: torch.Tensor, mask: torch.Tensor, sample_index: torch.Tensor, num_samples: int,
              mode: Aggregation = "token-mean", max_length: int | None = None,
              numerator_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Reduce per-token `values` ``[T]`` to a scalar (docs/algorithms.md, section 3, aggregations).

    `mask` defines the denominators (token counts); `numerator_mask` (default: `mask`)
    selects which tokens contribute to the sums, so AReaL's masking removes tokens from
    the numerator only. Samples with no masked token are left out of the sample means.
    """
    mask = mask.to(values.dtype)
    num = mask if numerator_mask is None else numerator_mask.to(values.dtype) * mask
    masked = values * num
    if mode == "token-mean":
        return masked.sum() / mask.sum().clamp(min=1.0)
    per_sample = torch.zeros(num_samples, dtype=values.dtype, device=values.device).index_add(0, sample_index, masked)
    counts = torch.zeros(num_samples, dtype=values.dtype, device=values.device).index_add(0, sample_index, mask)
    present = counts > 0
    n_present = present.sum().clamp(min=1).to(values.dtype)
    if mode == "seq-mean-token-mean":
        return (per_sample[present] / counts[present]).sum() / n_present
    if mode == "seq-mean-token-sum":
        return per_sample[present].sum() / n_present
    if mode == "seq-mean-token-sum-norm":
        length = max_length if max_length is not None else int(counts.max().item()) if counts.numel() else 1
        return per_sample.sum() / max(length, 1)
    raise ValueError(f"aggregation {mode!r} is not one of {AGGREGATIONS}")


# ---- the pieces --------------------------------------------------------------------------------

def kl_estimate(lp_cur: torch.Tensor, lp_ref: torch.Tensor, kind: KLKind) -> torch.Tensor:
    """Per-token KL(cur || ref) estimate with x = lp_cur - lp_ref: k1 = x, k2 = x^2/2, k3 = e^-x + x - 1."""
    x = lp_cur - lp_ref
    if kind == "k1":
        return x
    if kind == "k2":
        return 0.5 * x * x
    if kind == "k3":
        return (torch.exp(-x) + x - 1.0).clamp(-10.0, 10.0)
    if kind == "off":
        return torch.zeros_like(x)
    raise ValueError(f"kl {kind!r} is not one of {KL_KINDS}")


def importance_weights(lp_old: torch.Tensor, lp_beh: torch.Tensor, mode: ISMode, low: float = 0.0,
                       cap: float = 2.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(weight, keep) per token from the raw ratio exp(lp_old - lp_beh), both without gradient.

    - ``off``: weight 1 everywhere.
    - ``tis`` (slime/DART): weight clamped into [low, cap]; every token kept.
    - ``icepop``: raw weight inside [low, cap], tokens outside are dropped.
    - ``mask`` (AReaL rejection sampling): raw weight, tokens above cap dropped from the numerator.
    A NaN behavior log-prob (engine gave none) falls back to lp_beh = lp_old, i.e. weight 1.
    """
    lp_old, lp_beh = lp_old.detach(), lp_beh.detach()
    lp_beh = torch.where(torch.isnan(lp_beh), lp_old, lp_beh)
    raw = torch.exp(lp_old - lp_beh)
    keep = torch.ones_like(raw, dtype=torch.bool)
    if mode == "off":
        return torch.ones_like(raw), keep
    if mode == "tis":
        return raw.clamp(low, cap), keep
    if mode == "icepop":
        keep = (raw >= low) & (raw <= cap)
        return torch.where(keep, raw, torch.zeros_like(raw)), keep
    if mode == "mask":
        keep = raw <= cap
        return torch.where(keep, raw, torch.zeros_like(raw)), keep
    raise ValueError(f"importance {mode!r} is not one of {IS_MODES}")


def clipped_surrogate(lp_cur: torch.Tensor, lp_old: torch.Tensor, advantages: torch.Tensor, clip_low: float,
                      clip_high: float, dual_clip: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(per-token PPO-clip loss, clipped flag): -min(rho*A, clip(rho)*A), dual clip for A < 0."""
    rho = torch.exp(lp_cur - lp_old)
    unclipped = -rho * advantages
    clipped = -rho.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages
    loss = torch.maximum(unclipped, clipped)
    was_clipped = clipped > unclipped
    if dual_clip is not None:
        capped = torch.minimum(loss, -dual_clip * advantages)
        loss = torch.where(advantages < 0, capped, loss)
        was_clipped = was_clipped | ((advantages < 0) & (loss < torch.maximum(unclipped, clipped)))
    return loss, was_clipped.detach()


# ---- the loss ----------------------------------------------------------------------------------

def policy_loss(cfg: LossConfig, *, lp_cur: torch.Tensor, lp_old: torch.Tensor, advantages: torch.Tensor,
                mask: torch.Tensor, sample_index: torch.Tensor, num_samples: int,
                lp_beh: torch.Tensor | None = None, lp_ref: torch.Tensor | None = None,
                entropy: torch.Tensor | None = None, token_weight: torch.Tensor | None = None) -> LossOutput:
    """The full token-level loss of one micro-batch (module docstring).

    `token_weight` (``[T]``, no gradient) scales each token's policy loss, e.g. the data
    manager's down-weighting of stale samples.
    """
    mask_b = mask.bool()
    n_tok = int(mask_b.sum().item())
    if lp_beh is not None and cfg.importance != "off":
        weight, keep = importance_weights(lp_old, lp_beh, cfg.importance, cfg.is_low, cfg.is_cap)
    else:
        weight, keep = torch.ones_like(lp_old), torch.ones_like(mask_b)
    tok_loss, was_clipped = clipped_surrogate(lp_cur, lp_old.detach(), advantages, cfg.clip_low, cfg.clip_high,
                                              cfg.dual_clip)
    tok_loss = tok_loss * weight
    if token_weight is not None:
        tok_loss = tok_loss * token_weight.detach()
    agg = dict(mask=mask, sample_index=sample_index, num_samples=num_samples, mode=cfg.aggregation,
               max_length=cfg.max_length)
    pg = aggregate(tok_loss, numerator_mask=keep, **agg)
    total = pg
    kl_value = torch.zeros((), dtype=lp_cur.dtype)
    if cfg.kl != "off":
        if lp_ref is None:
            raise ValueError(f"kl={cfg.kl!r} needs reference log-probs (lp_ref); set kl: off or keep a reference model")
        kl_value = aggregate(kl_estimate(lp_cur, lp_ref.detach(), cfg.kl), **agg)
        total = total + cfg.kl_coef * kl_value
    ent_value = float("nan")
    if entropy is not None:
        ent = aggregate(entropy, **agg)
        ent_value = float(ent.detach())
        if cfg.entropy_coef:
            total = total - cfg.entropy_coef * ent
    denom = max(n_tok, 1)
    return LossOutput(
        loss=total,
        policy_loss=float(pg.detach()),
        kl=float(kl_value.detach()),
        entropy=ent_value,
        clip_fraction=float((was_clipped & mask_b).sum()) / denom,
        is_weight_mean=float((weight * mask).sum()) / denom if n_tok else 1.0,
        is_dropped_fraction=float((~keep & mask_b).sum()) / denom,
        num_tokens=n_tok,
    )


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               clip: float | None = 0.2) -> torch.Tensor:
    """Clipped value loss 0.5 * max((v - R)^2, (clip(v, v_old +- c) - R)^2), mean over `mask`."""
    err = (values - returns) ** 2
    if clip is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        err = torch.maximum(err, (clipped - returns) ** 2)
    m = mask.to(values.dtype)
    return 0.5 * (err * m).sum() / m.sum().clamp(min=1.0)
