"""OPRL: online process reward learning with an implicit PRM (docs/algorithms.md, section 2.5).

The learned part (`agentgym.credit.learned.ImplicitPRM`) gives per-turn implicit step rewards
`r_t = beta * sum_j (lp_phi(y_tj) - lp_old(y_tj))`. This module holds the pure parts:

    A_E(i)   = (R_i - mean_g R) / (std_g R + eps)               (GRPO within the group)
    A_S(i,t) = (r_t - mean_g r) / (max(std_g r, step_std_floor) + eps)   (over all turns of the group)
    A        = A_E + alpha * w * A_S                             (w: how well r ranks outcomes, below)

`step_std_floor` (default 0.01, in reward units: 0.2 nats of log-ratio per turn at the PRM's default
beta = 0.05) is this project's deviation from the reconstructed definition (`step_std_floor=0` restores
it): without it a group whose step rewards differ only by noise, as they do while the PRM has learned
nothing, gets a unit-scale step part of pure noise (std 1e-4 divided by itself), as large as a real
outcome comparison. With the floor such noise stays as small as it is, and a PRM that separates turns
by more than the floor is normalised as before (docs/credit-log.md).

The step part is added with a weight that says how much the step rewards know about *turns*. The default
`step_gate="auto"` uses the state gate where the batch's turns carry state fingerprints and the rank gate (below)
where none does; `"state"` and `"rank"` force one, `"none"` adds the step part with alpha as reconstructed.
The state gate:

    acc  = share of the batch's *same-state* turn pairs -- two turns taken in one environment state (same group,
           same `state_fingerprint`) with different actions, by episodes with different outcomes -- whose step
           rewards rank them as the outcomes do (ties half): read before the PRM trains on the batch
    lcb  = acc - gate_z * 0.5 / sqrt(n)          n: the distinct episodes in those pairs
    w    = clip(2 * lcb - 1, 0, 1)               A = A_E + alpha * w * A_S

This asks of the step rewards what the step part is used for: at one state, is the action of the episode that
went on to succeed the one rewarded? The rank gate below asked a weaker question, whether the step rewards rank
whole episodes, and on KeyDoor-v0 it opened (w near 0.3) on a PRM that ranked 70-80% of outcome pairs by mean
step reward while its per-turn signal was uncorrelated with the outcome comparison turn by turn: OPRL then fell
in 2 of 3 seeds (docs/credit-log.md). `step_gate="rank"`:

    acc  = share of the batch's outcome pairs (R_i > R_j in one group) whose *mean* step reward per turn
           ranks them the same way (ties half): read before the PRM trains on the batch, so on unseen data
    lcb  = acc - gate_z * 0.5 / sqrt(n)          n: the distinct episodes in those pairs
    w    = clip(2 * lcb - 1, 0, 1)               A = A_E + alpha * w * A_S

A PRM at chance adds nothing (w = 0 up to a one-sided 95% bound by default), one that ranks every pair of
a large batch adds its step part with alpha. The mean per turn, not the sum, because successes and
failures differ in length: a step reward drifting the same way on every turn (the policy moving away
from the PRM, docs/credit-log.md) ranks outcomes by length through the sum while saying nothing about which
turn mattered, and a gate on the sum opened exactly then (Maze-v0: it let through step parts that
favoured the rare tokens the policy had learned to avoid, and 2 of 3 seeds collapsed). The scalars report
`oprl_rank_acc` (the sum's ranking, what the PRM's DPO loss optimises), `oprl_rank_acc_per_turn` (the
rank gate's), `oprl_rank_pairs`, `oprl_state_acc` and `oprl_state_pairs` (the state gate's, 0.5 and 0 without
pairs), `oprl_gate_state` (1 where the state gate decided) and `oprl_step_weight` (alpha * w).

`step_clip` (default None: off) bounds each turn's normalised step part to [-step_clip, step_clip] before the
weight: a learned PRM's step rewards are heavy-tailed (KeyDoor-v0, seed 1: 2.5% of turns beyond 3 standard
deviations, the largest at 8-10), so at a weight of 0.3 one turn's step part can outweigh its outcome comparison.
Measured: clipping at 3 did not stop seed 1's fall (docs/credit-log.md), so it stays off. `step_center="episode"`
(default "none") subtracts each episode's mean step part from its turns, so the step part only moves credit
between an episode's turns and the outcome comparison is the episode part's alone (under trial, docs/credit-log.md).

plus the preference-pair rule and the PRM's trajectory-DPO loss on numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from agentgym.credit import validate
from agentgym.credit.baselines import outcome_advantages
from agentgym.credit.batch import PerTurn, TurnBatch
from agentgym.credit.registry import register_estimator
from agentgym.credit.result import CreditResult
from agentgym.credit.stats import EPS, segment_stats

#: the smallest spread of a group's step rewards that is scaled to unit size (see the module docstring)
STEP_STD_FLOOR = 0.01

STEP_REWARDS_FIX = ("Pass step_rewards=ImplicitPRM.step_rewards(episodes) (agentgym.credit.learned) or "
                    "implicit_step_rewards(prm_logprobs, old_logprobs, beta), one r_t per turn.")


def implicit_step_rewards(prm_logprobs: Sequence[Sequence[Sequence[float]]],
                          old_logprobs: Sequence[Sequence[Sequence[float]]], beta: float,
                          per_token_mean: bool = False) -> list[list[float]]:
    """r_t = beta * sum_j (lp_phi - lp_old) over turn t's action tokens, per episode per turn.

    Shapes: [E][T_i][L_t] log-probs in, [E][T_i] rewards out. `per_token_mean` divides by L_t
    (an option, not the paper's definition). A turn without action tokens gets 0.
    """
    out = []
    for prm_ep, old_ep in zip(prm_logprobs, old_logprobs, strict=True):
        row = []
        for prm, old in zip(prm_ep, old_ep, strict=True):
            diff = float(np.sum(np.asarray(prm, dtype=np.float64) - np.asarray(old, dtype=np.float64)))
            row.append(beta * (diff / max(len(prm), 1) if per_token_mean else diff))
        out.append(row)
    return out


def prm_loss(z_preferred: Sequence[float], z_rejected: Sequence[float], beta: float) -> float:
    """Trajectory DPO loss `mean -log sigmoid(beta * (z+ - z-))` over pairs (numpy reference)."""
    x = beta * (np.asarray(z_preferred, dtype=np.float64) - np.asarray(z_rejected, dtype=np.float64))
    return float(np.mean(np.logaddexp(0.0, -x))) if x.size else 0.0


def preference_pairs(outcomes: Sequence[float], groups: Sequence[object], *, margin: float = 0.0,
                     max_pairs_per_group: int | None = None) -> list[tuple[int, int]]:
    """Pairs (preferred, rejected) of batch indices with R_pref > R_rej + margin, inside each group.

    Capped at `max_pairs_per_group` per group (None: no cap). Under a cap, pairs are taken by
    decreasing outcome gap, then preferring episodes used least so far (spreads coverage); the
    result is deterministic. Groups with all-equal outcomes give no pairs.
    """
    members: dict[object, list[int]] = {}
    for i, g in enumerate(groups):
        members.setdefault(g, []).append(i)
    pairs: list[tuple[int, int]] = []
    for idx in members.values():
        cands = [(outcomes[i] - outcomes[j], i, j) for i in idx for j in idx if outcomes[i] > outcomes[j] + margin]
        cands.sort(key=lambda c: (-c[0], c[1], c[2]))
        cap = len(cands) if max_pairs_per_group is None else min(max_pairs_per_group, len(cands))
        used: dict[int, int] = {}
        for _ in range(cap):
            best = min(range(len(cands)), key=lambda k: (-cands[k][0], used.get(cands[k][1], 0)
                                                         + used.get(cands[k][2], 0), k))
            _, i, j = cands.pop(best)
            used[i] = used.get(i, 0) + 1
            used[j] = used.get(j, 0) + 1
            pairs.append((i, j))
    return pairs


def concordant(scores: np.ndarray, better: np.ndarray) -> float:
    """Of the pairs (i, j) marked in `better` [n, n] (i's outcome above j's), how many `scores` [n] order the same
    way, ties counted half."""
    diff = (scores[:, None] - scores[None, :])[better]
    return float((diff > 0).sum() + 0.5 * (diff == 0).sum())


def ranking_accuracy(batch: TurnBatch, step_rewards: np.ndarray) -> tuple[float, float, int, int]:
    """How well `step_rewards` [T] rank the outcomes inside each group, scored per episode by their sum and by
    their mean per turn: for each score, the share of pairs with R_i > R_j that it orders the same way (ties
    count half; 0.5 when there are no pairs); then how many pairs there were and how many distinct episodes
    they hold. Returns (accuracy of the sums, accuracy of the means, pairs, episodes)."""
    z_sum = np.bincount(batch.episode_of_turn, weights=step_rewards, minlength=batch.n_episodes)
    z_turn = z_sum / np.maximum(batch.lengths, 1)
    hits, pairs, episodes = np.zeros(2), 0, 0
    for code in range(batch.n_groups):
        members = np.flatnonzero(batch.group == code)
        better = batch.outcome[members][:, None] > batch.outcome[members][None, :]
        for k, z in enumerate((z_sum, z_turn)):
            hits[k] += concordant(z[members], better)
        pairs += int(better.sum())
        episodes += int((better.any(axis=0) | better.any(axis=1)).sum())
    acc_sum, acc_turn = (hits / pairs) if pairs else (0.5, 0.5)
    return float(acc_sum), float(acc_turn), pairs, episodes


def state_ranking_accuracy(batch: TurnBatch, step_rewards: np.ndarray) -> tuple[float, int, int]:
    """How well `step_rewards` [T] rank the actions taken in one state: over every pair of turns in one anchor
    cluster (same group, same state fingerprint; turns without one are their own cluster) whose actions differ
    (`action_text`, stripped) and whose episodes' outcomes differ, the share ordered as the outcomes are (ties
    half; 0.5 without pairs). Returns (accuracy, pairs, distinct episodes in them)."""
    cluster, n_clusters = batch.state_clusters("singleton", estimator="oprl")
    sizes = np.bincount(cluster, minlength=n_clusters)
    shared = np.flatnonzero(sizes[cluster] > 1)
    if len(shared) == 0:
        return 0.5, 0, 0
    ep = batch.episode_of_turn[shared]
    outcome = batch.outcome[ep]
    texts = [batch.episodes[int(e)].turns[int(p)].action_text.strip()
             for e, p in zip(ep, batch.position[shared], strict=True)]
    action = np.unique(np.asarray(texts, dtype=object), return_inverse=True)[1]
    order = np.argsort(cluster[shared], kind="stable")
    bounds = np.flatnonzero(np.diff(cluster[shared][order])) + 1
    hits, pairs, seen = 0.0, 0, np.zeros(batch.n_episodes, dtype=bool)
    for members in np.split(order, bounds):
        better = (outcome[members][:, None] > outcome[members][None, :]) & \
                 (action[members][:, None] != action[members][None, :])
        if not better.any():
            continue
        hits += concordant(step_rewards[shared[members]], better)
        pairs += int(better.sum())
        seen[ep[members][better.any(axis=0) | better.any(axis=1)]] = True
    return (hits / pairs if pairs else 0.5), pairs, int(seen.sum())


def step_weight(acc: float, episodes: int, gate_z: float) -> float:
    """w = clip(2 * lcb - 1, 0, 1), lcb = acc - gate_z * 0.5 / sqrt(episodes): 0 without pairs."""
    if episodes == 0:
        return 0.0
    lcb = acc - gate_z * 0.5 / np.sqrt(episodes)
    return float(np.clip(2.0 * lcb - 1.0, 0.0, 1.0))


@register_estimator("oprl", summary="GRPO episode advantage + alpha * (PRM ranking weight) * group-normalised "
                    "implicit PRM step reward", needs=("step_rewards: implicit PRM reward r_t per turn",))
def oprl(batch: TurnBatch, *, step_rewards: PerTurn | None = None, alpha: float = 1.0, eps: float = EPS,
         singleton: Literal["zero", "raw"] = "zero", step_std_floor: float = STEP_STD_FLOOR,
         step_gate: Literal["auto", "state", "rank", "none"] = "auto", gate_z: float = 1.645,
         step_clip: float | None = None, step_center: Literal["none", "episode"] = "none") -> CreditResult:
    """OPRL advantages.

    Inputs: outcomes R [E], `step_rewards` r [T]. Output: advantages [T], episode_part A_E [T],
    step_part A_S [T] (before the weight), turn_rewards r [T]; scalars `oprl_rank_acc`,
    `oprl_rank_acc_per_turn`, `oprl_rank_pairs` and `oprl_step_weight` (see the module docstring).
    """
    validate.number("oprl", "alpha", alpha, low=0.0)
    validate.number("oprl", "eps", eps, low=0.0)
    validate.choice("oprl", "singleton", singleton, ("zero", "raw"))
    validate.number("oprl", "step_std_floor", step_std_floor, low=0.0)
    validate.choice("oprl", "step_gate", step_gate, ("auto", "state", "rank", "none"))
    validate.number("oprl", "gate_z", gate_z, low=0.0)
    if step_clip is not None:
        validate.number("oprl", "step_clip", step_clip, low=0.0, low_open=True)
    validate.choice("oprl", "step_center", step_center, ("none", "episode"))
    r = batch.per_turn(step_rewards, name="step_rewards", estimator="oprl", fix=STEP_REWARDS_FIX)
    a_e = np.repeat(outcome_advantages(batch, norm="std", eps=eps, singleton=singleton), batch.lengths)
    g_turn = batch.group_of_turn
    stats = segment_stats(r, g_turn, batch.n_groups)
    floored = stats.with_std_floor(step_std_floor)
    a_s = floored.normalise(r, g_turn, "std", eps)
    if step_clip is not None:  # a heavy tail: a few turns' step parts reach 8-10 standard deviations
        a_s = np.clip(a_s, -step_clip, step_clip)
    if step_center == "episode":  # the step part moves credit between an episode's turns; A_E holds the outcome
        ep = batch.episode_of_turn
        a_s = segment_stats(a_s, ep, batch.n_episodes).center(a_s, ep)
    acc, acc_turn, pairs, episodes = ranking_accuracy(batch, r)
    state_acc, state_pairs, state_episodes = state_ranking_accuracy(batch, r)
    if step_gate == "auto":
        step_gate = "state" if (batch.fingerprint >= 0).any() else "rank"
    evidence = (state_acc, state_episodes) if step_gate == "state" else (acc_turn, episodes)
    weight = alpha * (1.0 if step_gate == "none" else step_weight(*evidence, gate_z))
    return CreditResult("oprl", batch, a_e + weight * a_s, episode_part=a_e, step_part=a_s, turn_rewards=r,
                        scalars={"oprl_rank_acc": acc, "oprl_rank_acc_per_turn": acc_turn,
                                 "oprl_rank_pairs": float(pairs), "oprl_state_acc": state_acc,
                                 "oprl_state_pairs": float(state_pairs),
                                 "oprl_gate_state": float(step_gate == "state"), "oprl_step_weight": weight})
