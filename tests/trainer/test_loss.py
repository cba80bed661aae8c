"""The policy loss reproduces the worked examples of docs/algorithms.md (section 3) and a hand-computed batch."""

from __future__ import annotations

import math

import pytest
import torch
from agentgym.trainer.loss import (
    LossConfig,
    aggregate,
    clipped_surrogate,
    importance_weights,
    kl_estimate,
    policy_loss,
    value_loss,
)

T = torch.tensor


def approx(values, expected, tol=1e-6):
    values = values.tolist() if isinstance(values, torch.Tensor) else values
    return values == pytest.approx(expected, abs=tol)


# ---- docs/algorithms.md section 3 --------------------------------------------------------------

def aggregation_batch():
    # seq1 losses [1, 1], seq2 [0, 0, 0, 0]; two padding/observation tokens that must not count
    values = T([1.0, 1.0, 9.0, 0.0, 0.0, 0.0, 0.0, 9.0], dtype=torch.float64)
    mask = T([1, 1, 0, 1, 1, 1, 1, 0])
    index = T([0, 0, 0, 1, 1, 1, 1, 1])
    return values, mask, index


@pytest.mark.parametrize("mode, expected", [
    ("token-mean", 1 / 3), ("seq-mean-token-mean", 0.5), ("seq-mean-token-sum", 1.0),
    ("seq-mean-token-sum-norm", 0.5)])
def test_aggregation_worked_example(mode, expected):
    values, mask, index = aggregation_batch()
    got = aggregate(values, mask, index, 2, mode, max_length=4)
    assert float(got) == pytest.approx(expected, abs=1e-6)


def test_kl_worked_example():
    cur, ref = T([-1.0], dtype=torch.float64), T([-1.5], dtype=torch.float64)
    assert approx(kl_estimate(cur, ref, "k1"), [0.5])
    assert approx(kl_estimate(cur, ref, "k2"), [0.125])
    assert approx(kl_estimate(cur, ref, "k3"), [0.106531])
    assert approx(kl_estimate(cur, ref, "off"), [0.0])


# ---- sections 6 and 7 -------------------------------------------------------------------------

def test_tis_worked_example():
    lp_old = T([-0.5, -1.0, -2.0], dtype=torch.float64)
    lp_beh = T([-0.6, -0.9, -2.7], dtype=torch.float64)
    raw = [math.exp(0.1), math.exp(-0.1), math.exp(0.7)]
    assert approx(raw, [1.1052, 0.9048, 2.0138], tol=1e-4)
    dart, keep = importance_weights(lp_old, lp_beh, "tis", cap=1.0)
    assert approx(dart, [1.0, raw[1], 1.0]) and keep.all()
    slime, _ = importance_weights(lp_old, lp_beh, "tis", cap=2.0)
    assert approx(slime, [raw[0], raw[1], 2.0])
    ice, keep = importance_weights(lp_old, lp_beh, "icepop", low=0.95, cap=2.0)
    assert approx(ice, [raw[0], 0.0, 0.0]) and keep.tolist() == [True, False, False]
    off, _ = importance_weights(lp_old, lp_beh, "off")
    assert approx(off, [1.0, 1.0, 1.0])


def test_missing_engine_logprob_falls_back_to_weight_one():
    w, _ = importance_weights(T([-0.5, -1.0]), T([float("nan"), -1.0]), "tis", cap=2.0)
    assert approx(w, [1.0, 1.0])


def test_areal_decoupled_worked_example():
    lp_beh, lp_old, lp_cur = T([-1.2], dtype=torch.float64), T([-1.0], dtype=torch.float64), T([-0.9], dtype=torch.float64)
    w, keep = importance_weights(lp_old, lp_beh, "mask", cap=5.0)
    assert approx(w, [1.221403]) and keep.all()
    tok, clipped = clipped_surrogate(lp_cur, lp_old, T([1.0], dtype=torch.float64), 0.2, 0.2)
    assert approx(torch.exp(lp_cur - lp_old), [1.105171]) and not clipped.any()
    assert approx(w * tok, [-1.349859])
    # w = 6 > 5: masked from the numerator, still counted in the denominator
    out = policy_loss(LossConfig(importance="mask", is_cap=5.0, aggregation="token-mean"),
                      lp_cur=T([-0.9, -0.9], dtype=torch.float64), lp_old=T([-1.0, -1.0], dtype=torch.float64),
                      lp_beh=T([-1.2, -1.0 - math.log(6.0)], dtype=torch.float64), advantages=T([1.0, 1.0], dtype=torch.float64),
                      mask=T([1, 1]), sample_index=T([0, 0]), num_samples=1)
    assert out.loss.item() == pytest.approx(-1.349859 / 2, abs=1e-6)
    assert out.is_dropped_fraction == 0.5


def test_clip_higher_is_asymmetric():
    lp_old = T([0.0, 0.0], dtype=torch.float64)
    lp_cur = torch.log(T([1.5, 0.5], dtype=torch.float64))
    adv = T([1.0, -1.0], dtype=torch.float64)
    loss, clipped = clipped_surrogate(lp_cur, lp_old, adv, clip_low=0.2, clip_high=0.28)
    # A>0, rho 1.5 -> clipped at 1.28; A<0, rho 0.5 -> max(0.5, 0.8) = 0.8 -> loss 0.8
    assert approx(loss, [-1.28, 0.8]) and clipped.tolist() == [True, True]


def test_dual_clip_caps_negative_advantage_loss():
    lp_old, lp_cur = T([0.0], dtype=torch.float64), torch.log(T([5.0], dtype=torch.float64))
    loss, _ = clipped_surrogate(lp_cur, lp_old, T([-1.0], dtype=torch.float64), 0.2, 0.2, dual_clip=3.0)
    assert approx(loss, [3.0])  # unclipped would be 5.0
    loss, _ = clipped_surrogate(lp_cur, lp_old, T([-1.0], dtype=torch.float64), 0.2, 0.2)
    assert approx(loss, [5.0])


def test_hand_computed_tiny_batch():
    """Two samples; observation tokens (mask 0) carry absurd values that must not leak in."""
    d = torch.float64
    lp_old = T([0.0, -1.0, -0.5, 0.0, -2.0, -0.3], dtype=d)
    lp_cur = T([5.0, -0.8, -0.5, 7.0, -2.2, -0.1], dtype=d, requires_grad=True)
    lp_ref = T([0.0, -1.0, -0.7, 0.0, -2.0, -0.2], dtype=d)
    adv = T([100.0, 1.0, 1.0, -100.0, -0.5, -0.5], dtype=d)
    mask = T([0, 1, 1, 0, 1, 1])
    index = T([0, 0, 0, 1, 1, 1])
    ent = T([50.0, 0.4, 0.6, 50.0, 1.0, 0.2], dtype=d)
    cfg = LossConfig(clip_low=0.2, clip_high=0.2, aggregation="seq-mean-token-mean", kl="k1", kl_coef=0.1,
                     entropy_coef=0.01)
    out = policy_loss(cfg, lp_cur=lp_cur, lp_old=lp_old, advantages=adv, mask=mask, sample_index=index,
                      num_samples=2, lp_ref=lp_ref, entropy=ent)
    # by hand: rho = e^0.2 = 1.2214 -> clipped 1.2 (A=1): -1.2; rho = 1 (A=1): -1
    # sample 2: rho = e^-0.2 = 0.8187 (A=-0.5): max(0.40937, 0.4) = 0.40937; rho = e^0.2 (A=-0.5): max(0.6107, 0.6)
    s1 = (-1.2 + -1.0) / 2
    s2 = (0.5 * math.exp(-0.2) + 0.5 * math.exp(0.2)) / 2
    pg = (s1 + s2) / 2
    kl = ((0.2 + 0.2) / 2 + (-0.2 + 0.1) / 2) / 2
    ent_mean = ((0.4 + 0.6) / 2 + (1.0 + 0.2) / 2) / 2
    assert out.policy_loss == pytest.approx(pg, abs=1e-9)
    assert out.kl == pytest.approx(kl, abs=1e-9)
    assert out.entropy == pytest.approx(ent_mean, abs=1e-9)
    assert out.loss.item() == pytest.approx(pg + 0.1 * kl - 0.01 * ent_mean, abs=1e-9)
    assert out.clip_fraction == pytest.approx(1 / 4)
    out.loss.backward()
    assert lp_cur.grad[0] == 0 and lp_cur.grad[3] == 0  # observation tokens get no gradient
    assert lp_cur.grad[1] != 0


def test_token_weight_down_weights_stale_samples():
    base = dict(lp_cur=T([-1.0, -1.0]), lp_old=T([-1.0, -1.0]), advantages=T([1.0, 1.0]), mask=T([1, 1]),
                sample_index=T([0, 1]), num_samples=2)
    full = policy_loss(LossConfig(), **base)
    half = policy_loss(LossConfig(), token_weight=T([1.0, 0.0]), **base)
    assert full.loss.item() == pytest.approx(-1.0) and half.loss.item() == pytest.approx(-0.5)


def test_kl_without_reference_is_a_clear_error():
    with pytest.raises(ValueError, match="lp_ref"):
        policy_loss(LossConfig(kl="k3", kl_coef=0.1), lp_cur=T([0.0]), lp_old=T([0.0]), advantages=T([1.0]),
                    mask=T([1]), sample_index=T([0]), num_samples=1)


@pytest.mark.parametrize("kwargs", [dict(aggregation="mean"), dict(kl="k4"), dict(dual_clip=0.5),
                                    dict(importance="clamp"), dict(is_low=2.0, is_cap=1.0)])
def test_bad_config_is_rejected(kwargs):
    with pytest.raises(ValueError):
        LossConfig(**kwargs)


def test_clipped_value_loss():
    v, old, ret = T([1.0, 0.0]), T([0.5, 0.0]), T([0.0, 1.0])
    # token 1: v moved +0.5 from old; clipped to 0.7: max(1, 0.49) = 1; token 2: (0-1)^2 = 1
    assert value_loss(v, old, ret, T([1, 1]), clip=0.2).item() == pytest.approx(0.5 * (1.0 + 1.0) / 2)
    assert value_loss(T([0.0, 0.0]), T([1.0, 1.0]), T([2.0, 2.0]), T([1, 0]), clip=0.2).item() == pytest.approx(0.5 * 4.0)
