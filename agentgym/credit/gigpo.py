"""GiGPO: group-in-group advantages (docs/algorithms.md, section 2.3).

A = A_E + omega * A_S, where A_E is the GRPO advantage of the trajectory's outcome R_i (one value per
trajectory, the paper's definition), and A_S normalises the discounted step return
`G_t = sum_k gamma^(k-t) r_k - invalid_penalty * [turn invalid]` among the turns of the same group
that were taken from the same environment state (the anchor cluster).

The step part's divisor has a floor, `max(std, step_std_floor) + eps` (default 0.1 in reward units: one
invalid-action penalty). This is this project's deviation from the paper (`step_std_floor=0` restores it):
in the long episodes of an env with recurring states (KeyDoor-v0) an anchor cluster holds 30-110 turns of
one state, nearly all with the same step return; one invalid turn among n then gets -sqrt(n - 1) (about
-10) and every other turn of the cluster a small positive share: the loop the policy is stuck in is
reinforced, its entropy collapses and success falls to 0 (docs/credit-log.md). With the floor a spread below
one penalty keeps its own scale, and clusters whose returns differ by an outcome are normalised as before.

The invalid-action penalty acts at the step level only (in `episode_stats="trajectory"`, the default).
The reference code also subtracts it from the row scores of the episode part; mixing those row scores
with per-trajectory statistics gave advantages of 20-30 in groups whose outcomes were all equal (the
std of the trajectory scores is then a few hundredths, the row deviations a full penalty), which
collapsed training on Maze-v0 (docs/credit-log.md). `episode_stats="rows"` keeps the reference behaviour:
row scores `S = R_i - invalid_penalty * [turn invalid]` with row statistics.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Literal

import numpy as np

from agentgym.credit import validate
from agentgym.credit.batch import TurnBatch
from agentgym.credit.errors import CreditInputError
from agentgym.credit.registry import register_estimator
from agentgym.credit.result import CreditResult
from agentgym.credit.stats import EPS, Norm, discounted_cumsum, segment_stats

STEP_STD_FLOOR = 0.1  #: reward units: one invalid-action penalty (see the module docstring)
EpisodeStats = Literal["trajectory", "rows"]
AnchorMode = Literal["exact", "similarity"]
StepScale = Literal["cluster", "outcome"]


def similarity_clusters(batch: TurnBatch, threshold: float = 0.95) -> tuple[np.ndarray, int]:
    """Greedy text clusters per group (reference-code similarity mode) over `Turn.observation`.

    Each turn joins the first existing cluster of its group (insertion order) whose *first member*
    has `difflib.SequenceMatcher(a, b).ratio() >= threshold`, else opens a new cluster.
    """
    codes = np.empty(batch.n_turns, dtype=np.int64)
    heads: dict[int, list[tuple[str, int]]] = {}
    n = 0
    groups = batch.group_of_turn.tolist()
    texts = (t.observation for ep in batch.episodes for t in ep.turns)
    for row, (g, text) in enumerate(zip(groups, texts, strict=True)):
        members = heads.setdefault(g, [])
        for head, code in members:
            m = difflib.SequenceMatcher(None, head, text)
            if m.real_quick_ratio() >= threshold and m.quick_ratio() >= threshold and m.ratio() >= threshold:
                codes[row] = code
                break
        else:
            members.append((text, n))
            codes[row] = n
            n += 1
    return codes, n


def episode_advantage(batch: TurnBatch, score: np.ndarray, *, norm: Norm, episode_stats: EpisodeStats,
                      singleton: str, eps: float) -> np.ndarray:
    """A_E per turn [T] (see the module docstring).

    `trajectory` (default): one value per trajectory, the group-normalised outcome R_i, broadcast to its
    turns; its statistics and its values are the same numbers, so |A_E| <= (N-1)/sqrt(N) in a group
    of N. `rows`: the reference code's statistics over the row scores `score` [T].
    """
    g_turn = batch.group_of_turn
    if episode_stats == "trajectory":
        stats = segment_stats(batch.outcome, batch.group, batch.n_groups)
        per_traj = stats.center(batch.outcome, batch.group)
        if norm == "std":
            per_traj = per_traj / (stats.std[batch.group] + eps)
        adv = np.repeat(np.where(stats.count[batch.group] > 1, per_traj, 0.0), batch.lengths)
        score = np.repeat(batch.outcome, batch.lengths)
    else:
        stats = segment_stats(score, g_turn, batch.n_groups)
        adv = stats.center(score, g_turn)
        if norm == "std":
            adv = adv / (stats.std[g_turn] + eps)
        adv = np.where(stats.count[g_turn] > 1, adv, 0.0)
    lone = batch.group_sizes[g_turn] == 1
    return np.where(lone, score if singleton == "raw" else 0.0, adv)


@register_estimator("gigpo", summary="episode advantage + omega * step advantage among same-state turns",
                    needs=("Turn.state_fingerprint (exact mode) or Turn.observation (similarity mode)",))
def gigpo(batch: TurnBatch, *, omega: float = 1.0, gamma: float = 0.95, norm: Norm = "std",
          episode_stats: EpisodeStats = "trajectory", singleton: Literal["zero", "raw"] = "zero",
          anchor: AnchorMode = "exact", similarity_threshold: float = 0.95, invalid_penalty: float = 0.1,
          missing_fingerprint: Literal["error", "singleton"] = "error", eps: float = EPS,
          step_std_floor: float = STEP_STD_FLOOR, step_scale: StepScale = "cluster",
          clip_invalid: bool = False) -> CreditResult:
    """GiGPO advantages.

    Inputs: outcomes R [E], turn rewards r [T], validity [T], fingerprints [T] (or observations in
    similarity mode), group codes. Output: advantages [T], `episode_part` (A_E) [T] and
    `step_part` (A_S) [T]; A = A_E + omega * A_S.

    `step_scale="outcome"` divides the step part by at least the std of the group's outcomes (the episode
    part's divisor) besides `step_std_floor`: both parts are then on one scale, and a cluster of n revisits
    with one successful return among zeros no longer gets about sqrt(n) from its own tiny std. Measured on
    KeyDoor-v0 it learned no faster than the default (docs/credit-log.md), which stays the paper's per-cluster std.

    `clip_invalid=True` caps the advantage of a turn whose action did not take effect at 0 (`min(A, 0)` on
    invalid rows): such a turn did nothing towards its episode's outcome, so it never shares a success, while a
    failure still pushes it down. Without it a blocked move in a successful episode gets the episode's positive
    advantage less one penalty, which on KeyDoor-v0 keeps the policy's wall-pressing loops alive.
    """
    _check(omega, gamma, norm, episode_stats, singleton, anchor, similarity_threshold, invalid_penalty,
           missing_fingerprint, eps)
    validate.number("gigpo", "step_std_floor", step_std_floor, low=0.0)
    validate.choice("gigpo", "step_scale", step_scale, ("cluster", "outcome"))
    validate.choice("gigpo", "clip_invalid", clip_invalid, (True, False))
    penalty_rows = invalid_penalty * (~batch.valid)
    score = batch.outcome[batch.episode_of_turn] - penalty_rows
    a_e = episode_advantage(batch, score, norm=norm, episode_stats=episode_stats, singleton=singleton, eps=eps)
    step_return = discounted_cumsum(batch.reward, gamma, batch.backward_levels) - penalty_rows
    if anchor == "exact":
        clusters, n_clusters = batch.state_clusters(missing_fingerprint, estimator="gigpo")
    else:
        clusters, n_clusters = batch.cached(f"gigpo.similarity.{similarity_threshold}",
                                            lambda: similarity_clusters(batch, similarity_threshold))
    stats = segment_stats(step_return, clusters, n_clusters)
    floored = stats.with_std_floor(step_std_floor)
    if step_scale == "outcome":
        outcome_std = segment_stats(batch.outcome, batch.group, batch.n_groups).std
        cluster_group = np.zeros(n_clusters, dtype=np.int64)
        cluster_group[clusters] = batch.group_of_turn
        floored = dataclasses.replace(floored, std=np.maximum(floored.std, outcome_std[cluster_group]))
    a_s = floored.normalise(step_return, clusters, norm, eps)
    advantages = a_e + omega * a_s
    if clip_invalid:
        advantages = np.where(batch.valid, advantages, np.minimum(advantages, 0.0))
    return CreditResult("gigpo", batch, advantages, episode_part=a_e, step_part=a_s,
                        returns=None, turn_rewards=None, step_group=clusters)


def _check(omega: float, gamma: float, norm: str, episode_stats: str, singleton: str, anchor: str,
           similarity_threshold: float, invalid_penalty: float, missing_fingerprint: str, eps: float) -> None:
    validate.number("gigpo", "omega", omega, low=0.0)
    validate.number("gigpo", "gamma", gamma, low=0.0, high=1.0)
    validate.choice("gigpo", "norm", norm, ("std", "mean"))
    validate.choice("gigpo", "episode_stats", episode_stats, ("trajectory", "rows"))
    validate.choice("gigpo", "singleton", singleton, ("zero", "raw"))
    validate.choice("gigpo", "anchor", anchor, ("exact", "similarity"))
    validate.number("gigpo", "similarity_threshold", similarity_threshold, low=0.0, high=1.0)
    validate.number("gigpo", "invalid_penalty", invalid_penalty, low=0.0)
    validate.choice("gigpo", "missing_fingerprint", missing_fingerprint, ("error", "singleton"))
    validate.number("gigpo", "eps", eps, low=0.0)
    if anchor == "similarity" and missing_fingerprint != "error":
        raise CreditInputError("gigpo: missing_fingerprint only applies to anchor='exact'; "
                               "similarity mode clusters Turn.observation text.")
