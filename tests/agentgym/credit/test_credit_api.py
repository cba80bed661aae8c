"""The public interface: registry, input validation, token broadcast, estimator options."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from agentgym import Episode, Turn
from agentgym.credit import (
    ESTIMATORS,
    CreditInputError,
    CreditParamError,
    TurnBatch,
    UnknownEstimatorError,
    compute_advantages,
    compute_credit,
    flat_token_advantages,
    token_advantages,
)


def ep(group="g", rewards=(0.0, 1.0), fps=None, invalid=(), **kw) -> Episode:
    fps = fps or [f"s{i}" for i in range(len(rewards))]
    turns = [Turn(index=i, reward=float(r), state_fingerprint=fps[i],
                  info={"error_kind": "malformed_action"} if i in invalid else {})
             for i, r in enumerate(rewards)]
    return Episode(group_id=group, turns=turns, **kw).finish()


def test_estimators_lists_every_method():
    assert {"grpo", "rloo", "gae", "gigpo", "spa", "oprl", "trace", "dr_grpo"} <= set(ESTIMATORS)
    assert ESTIMATORS["gae"].uses_critic and not ESTIMATORS["gae"].group_relative
    assert ESTIMATORS["gigpo"].params["omega"] == 1.0 and ESTIMATORS["gigpo"].params["gamma"] == 0.95


def test_unknown_estimator_suggests_the_closest_name():
    with pytest.raises(UnknownEstimatorError, match="Did you mean: gigpo"):
        compute_advantages("gipgo", [ep()])
    with pytest.raises(KeyError):
        compute_advantages("nope", [ep()])


def test_unknown_parameter_is_rejected_with_suggestions():
    with pytest.raises(CreditParamError, match="no parameter 'omgea'.*Did you mean: omega"):
        compute_advantages("gigpo", [ep()], omgea=2.0)
    with pytest.raises(CreditParamError, match="gamma=1.5"):
        compute_advantages("gigpo", [ep()], gamma=1.5)
    with pytest.raises(CreditParamError, match="norm='l2'"):
        compute_advantages("gigpo", [ep()], norm="l2")


@pytest.mark.parametrize("name, episodes, what", [
    ("gigpo", [ep(fps=["", "s1"])], "no state_fingerprint"),
    ("gae", [ep()], "needs `values`"),
    ("spa", [ep()], "needs `contributions`"),
    ("oprl", [ep()], "needs `step_rewards`"),
    ("trace", [ep(), ep()], "needs a rollout tree"),
])
def test_missing_inputs_say_what_is_missing(name, episodes, what):
    with pytest.raises(CreditInputError, match=what):
        compute_advantages(name, episodes)


def test_missing_group_id_and_bad_shapes_are_rejected():
    with pytest.raises(CreditInputError, match="no group_id"):
        compute_advantages("grpo", [ep(group="")])
    with pytest.raises(CreditInputError, match="has 1 values but the episode has 2 turns"):
        compute_advantages("gae", [ep()], values=[[0.0]])
    with pytest.raises(CreditInputError, match="2 rows but the batch has 1 episodes"):
        compute_advantages("gae", [ep()], values=[[0.0, 0.0], [0.0]])
    with pytest.raises(CreditInputError, match="non-finite"):
        compute_advantages("gae", [ep()], values=np.array([0.0, np.nan]))
    with pytest.raises(CreditInputError, match="3 values but the batch has 2 turns"):
        compute_advantages("gae", [ep()], values=np.zeros(3))


def test_tree_errors_name_the_broken_link():
    orphan = ep(parent_id="missing", branch_turn=1)
    with pytest.raises(CreditInputError, match="not in the batch"):
        compute_advantages("trace", [ep(), orphan])
    root = ep(id="r")
    with pytest.raises(CreditInputError, match="no branch_turn"):
        compute_advantages("trace", [root, ep(parent_id="r")])
    with pytest.raises(CreditInputError, match="branch_turn must be in"):
        compute_advantages("trace", [root, ep(parent_id="r", branch_turn=5)])
    with pytest.raises(CreditInputError, match="inside one group"):
        compute_advantages("trace", [root, ep(group="h", parent_id="r", branch_turn=1)])
    a, b = ep(id="a", parent_id="b", branch_turn=1), ep(id="b", parent_id="a", branch_turn=1)
    with pytest.raises(CreditInputError, match="cycle"):
        compute_advantages("trace", [a, b])


def test_trace_without_tree_degrades_to_dr_grpo_when_allowed():
    eps = [ep(rewards=(0, 1)), ep(rewards=(0, 0)), ep(rewards=(0, 0, 1))]
    assert np.allclose(np.concatenate([np.asarray(a) for a in compute_advantages("trace", eps, require_tree=False)]),
                       np.concatenate([np.asarray(a) for a in compute_advantages("dr_grpo", eps)]))


def test_import_does_not_load_torch():
    code = "import sys, agentgym.credit; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_prebuilt_batch_is_reusable_across_estimators():
    eps = [ep(rewards=(0, 1)), ep(rewards=(0, 0))]
    batch = TurnBatch.from_episodes(eps)
    assert compute_advantages("grpo", batch) == compute_advantages("grpo", eps)
    assert compute_advantages("gigpo", batch) == compute_advantages("gigpo", eps)


def test_zero_length_episode_gets_an_empty_row_but_counts_in_its_group():
    eps = [ep(rewards=(1.0,)), Episode(group_id="g", total_reward=0.0)]
    adv = compute_advantages("grpo", eps)
    assert adv[1] == [] and adv[0][0] == pytest.approx(1 / (np.std([1, 0], ddof=1) + 1e-6) * 0.5)


def test_singleton_modes():
    lone = [ep(rewards=(0, 2))]
    assert compute_advantages("grpo", lone) == [[0.0, 0.0]]
    assert compute_advantages("grpo", lone, singleton="raw") == [[2.0, 2.0]]
    assert compute_advantages("rloo", lone) == [[0.0, 0.0]]


# ---- gigpo options ------------------------------------------------------------------------------
def test_gigpo_invalid_penalty_applies_per_row_after_discounting():
    a = ep(rewards=(0, 1), fps=["A", "B"], invalid=(0,))
    b = ep(rewards=(0, 1), fps=["A", "B"])
    res = compute_credit("gigpo", [a, b], norm="mean", invalid_penalty=0.1, gamma=1.0)
    # G: a = [1 - 0.1, 1], b = [1, 1]; cluster A = {0.9, 1.0}
    assert np.allclose(res.step_part, [-0.05, 0.0, 0.05, 0.0])
    # the episode part is the outcome's alone (both succeeded): the penalty acts at the step level only
    assert np.allclose(res.episode_part, 0.0)
    rows = compute_credit("gigpo", [a, b], norm="mean", invalid_penalty=0.1, episode_stats="rows")
    # reference rows: S = [0.9, 1, 1, 1], mean 0.975
    assert np.allclose(rows.episode_part, [0.9 - 0.975, 1 - 0.975, 1 - 0.975, 1 - 0.975])
    off = compute_credit("gigpo", [a, b], invalid_penalty=0.0)
    assert np.allclose(off.advantages, 0.0)


def test_gigpo_clip_invalid_keeps_a_blocked_move_from_sharing_its_episodes_success():
    win = ep(rewards=(0, 0, 1), fps=["A", "A", "B"], invalid=(0,))  # pressed a wall, then walked on and won
    lose = [ep(rewards=(0, 0, 0), fps=["A", "A", "C"], invalid=inv) for inv in [(0,), ()]]
    plain = compute_credit("gigpo", [win, *lose])
    clipped = compute_credit("gigpo", [win, *lose], clip_invalid=True)
    assert plain.advantages[0] > 0  # the blocked move shares the success
    assert clipped.advantages[0] == 0.0
    invalid = ~clipped.batch.valid
    # a failure still pushes its blocked move down by as much; valid turns and both parts are unchanged
    assert np.allclose(clipped.advantages[invalid], np.minimum(plain.advantages[invalid], 0.0))
    assert clipped.advantages[3] == plain.advantages[3] < 0
    assert np.allclose(clipped.advantages[~invalid], plain.advantages[~invalid])
    assert np.allclose(clipped.episode_part, plain.episode_part) and np.allclose(clipped.step_part, plain.step_part)


def test_gigpo_episode_part_stays_bounded_when_outcomes_are_equal():
    """All rollouts fail, some with invalid actions: no penalty-only signal blown up by a tiny std."""
    group = [ep(rewards=(0, 0, 0, 0), fps=["A", "B", "C", "D"], invalid=inv)
             for inv in [(), (1,), (), (0, 2), (), (), (3,), ()]]
    res = compute_credit("gigpo", group)
    assert np.allclose(res.episode_part, 0.0)
    assert np.abs(res.step_part).max() <= np.sqrt(8) and np.all(res.step_part[~res.batch.valid] < 0)
    mixed = [ep(rewards=(0, float(i % 2)), fps=["A", "B"], invalid=(0,) if i < 3 else ()) for i in range(8)]
    assert np.abs(compute_credit("gigpo", mixed).episode_part).max() <= 7 / np.sqrt(8) + 1e-6


def test_gigpo_groups_never_share_clusters():
    eps = [ep("g1", (0, 1), ["A", "B"]), ep("g2", (0, 0), ["A", "B"])]
    res = compute_credit("gigpo", eps)
    assert np.allclose(res.step_part, 0.0)  # each cluster is a singleton inside its group


def test_gigpo_missing_fingerprint_singleton_mode():
    eps = [ep(rewards=(0, 1), fps=["", "B"]), ep(rewards=(0, 0), fps=["", "B"])]
    res = compute_credit("gigpo", eps, missing_fingerprint="singleton", norm="mean", gamma=1.0)
    assert res.step_part[0] == 0.0 and res.step_part[2] == 0.0
    assert np.allclose(res.step_part[[1, 3]], [0.5, -0.5])


def test_state_clusters_split_by_group_and_state_and_name_the_estimator_when_a_fingerprint_is_missing():
    batch = TurnBatch.from_episodes([ep("g1", (0, 0, 1), ["A", "B", "A"]), ep("g2", (0, 1), ["A", "B"]),
                                     ep("g1", (0, 1), ["", "B"])])
    codes, k = batch.state_clusters("singleton", estimator="gigpo")
    assert k == 5 and codes[0] == codes[2] and codes[1] == codes[6]  # g1's A twice; g1's B in two episodes
    assert len({codes[0], codes[3], codes[5]}) == 3  # one state in two groups is two clusters; "" is alone
    kept = batch.state_clusters("singleton", estimator="oprl")
    assert kept is batch.state_clusters("singleton", estimator="oprl")  # memoised per batch
    with pytest.raises(CreditInputError, match="estimator 'oprl'.*episode .* turn 0 has no state_fingerprint"):
        batch.state_clusters(estimator="oprl")


def test_gigpo_similarity_mode_clusters_near_identical_text():
    def tep(rewards, texts):
        return Episode(group_id="g", turns=[Turn(index=i, observation=o, reward=r)
                                            for i, (o, r) in enumerate(zip(texts, rewards, strict=True))]).finish()

    room = "You are in a kitchen. You see a fridge, a table and a red apple on the counter."
    eps = [tep((0, 1), [room, "done"]), tep((0, 0), [room.replace("red", "ted"), "other place entirely"])]
    res = compute_credit("gigpo", eps, anchor="similarity", norm="mean", gamma=1.0)
    assert np.allclose(res.step_part, [0.5, 0.0, -0.5, 0.0])
    strict = compute_credit("gigpo", eps, anchor="similarity", similarity_threshold=1.0, norm="mean")
    assert np.allclose(strict.step_part, 0.0)


def test_gigpo_unhashable_anchor_values_are_made_hashable():
    eps = [ep(rewards=(0, 1)), ep(rewards=(0, 0))]
    for e in eps:
        e.turns[0].state_fingerprint = {"cell": [1, 2]}
    res = compute_credit("gigpo", eps, norm="mean", gamma=1.0)
    assert np.allclose(res.step_part[[0, 2]], [0.5, -0.5])


# ---- gae / spa options --------------------------------------------------------------------------
def test_gae_outcome_rewards_and_bootstrap():
    e = Episode(group_id="g", total_reward=2.0, turns=[Turn(index=0), Turn(index=1)])
    res = compute_credit("gae", [e], values=[[0.0, 0.0]], reward_source="outcome")
    assert np.allclose(res.advantages, [2.0, 2.0])
    boot = compute_credit("gae", [e], values=[[0.0, 0.0]], bootstrap=[1.0], gamma=0.5, lam=1.0)
    assert np.allclose(boot.advantages, [0.25, 0.5])


def test_spa_reference_quirks_are_flags():
    e = Episode(group_id="g", total_reward=1.0, turns=[Turn(index=i) for i in range(3)])
    res = compute_credit("spa", [e], contributions=[[0.2, 0.5, 0.4]], values=[[0, 0, 0]], beta=0.0,
                         horizon_scale=True, outcome_residual=False)
    assert np.allclose(res.turn_rewards, [0.4, 0.5, 0.0])
    others = [Episode(group_id="g", total_reward=r, turns=[Turn(index=0)]) for r in (0.0, 0.0)]
    loo = compute_credit("spa", [e, *others], values=np.zeros(5), beta=0.0, loo_baseline=True)
    assert np.allclose(loo.turn_rewards[:3], 1.0) and np.allclose(loo.turn_rewards[3:], -0.5)


# ---- token broadcast ----------------------------------------------------------------------------
def test_token_advantages_follow_the_loss_mask():
    e = Episode(group_id="g", total_reward=1.0, turns=[
        Turn(index=0, action_ids=[5, 6, 7], loss_mask=[1, 0, 1]), Turn(index=1, action_ids=[8, 9])])
    tokens = token_advantages([e], [[2.0, -1.0]])
    assert tokens == [[[2.0, 0.0, 2.0], [-1.0, -1.0]]]
    flat = flat_token_advantages([e], [[2.0, -1.0]])
    assert flat.mask.tolist() == [1, 0, 1, 1, 1] and flat.turn_offsets.tolist() == [0, 3, 5]
    with pytest.raises(CreditInputError, match="one advantage per turn"):
        token_advantages([e], [[1.0]])
    e.turns[1].loss_mask = [1]
    with pytest.raises(CreditInputError, match="one mask entry per token"):
        token_advantages([e], [[1.0, 1.0]])


def test_token_advantages_drop_untrained_tree_copies():
    root = Episode(id="r", group_id="g", total_reward=1.0,
                   turns=[Turn(index=i, action_ids=[1, 2]) for i in range(2)])
    child = Episode(id="c", group_id="g", total_reward=0.0, parent_id="r", branch_turn=1,
                    turns=[Turn(index=i, action_ids=[1, 2]) for i in range(2)])  # turn 0 is a copy
    result = compute_credit("trace", [root, child])
    assert result.trained.tolist() == [True, True, False, True]
    tokens = flat_token_advantages([root, child], result)
    assert tokens.mask.tolist() == [1, 1, 1, 1, 0, 0, 1, 1]


def test_write_to_fills_turn_advantage():
    eps = [ep(rewards=(1.0,)), ep(rewards=(0.0,))]
    compute_credit("dr_grpo", eps).write_to()
    assert [e.turns[0].advantage for e in eps] == [0.5, -0.5]


# ---- oprl helpers -------------------------------------------------------------------------------
def test_preference_pairs_respect_margin_groups_and_cap():
    from agentgym.credit.oprl import implicit_step_rewards, preference_pairs

    outcomes, groups = [1.0, 0.0, 1.0, 0.0, 0.5, 0.5], ["g", "g", "g", "g", "h", "h"]
    assert preference_pairs(outcomes, groups) == [(0, 1), (2, 3), (0, 3), (2, 1)]
    capped = preference_pairs(outcomes, groups, max_pairs_per_group=2)
    assert capped == [(0, 1), (2, 3)]  # spread over episodes before reusing one
    assert preference_pairs([1.0, 0.9], ["g", "g"], margin=0.2) == []
    assert np.allclose(implicit_step_rewards([[[-1.0, -0.5, -2.0]]], [[[-1.2, -0.5, -2.5]]], beta=0.1,
                                             per_token_mean=True), [[0.07 / 3]])


def test_oprl_step_part_of_an_untrained_prm_stays_at_its_own_small_scale():
    """Step rewards that differ only by noise (an implicit PRM that has learned nothing) are not blown up to
    unit scale by their own tiny spread; a PRM that separates turns by more than the floor is normalised."""
    rng = np.random.default_rng(0)
    outcomes = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0]
    group = [Episode(group_id="g", total_reward=r, turns=[Turn(index=i) for i in range(10)]) for r in outcomes]
    noise = rng.normal(0.0, 1e-4, size=(8, 10)).tolist()
    res = compute_credit("oprl", group, step_rewards=noise)
    assert np.abs(res.step_part).max() < 0.05  # was std 0.98, max 2.5 with the reconstructed definition
    assert np.abs(res.advantages - res.episode_part).max() < 0.05  # the outcome comparison decides
    paper = compute_credit("oprl", group, step_rewards=noise, step_std_floor=0.0)
    assert np.std(paper.step_part) > 0.9  # the reconstructed definition, kept behind step_std_floor=0
    learned = (rng.normal(0.0, 0.2, size=(8, 10))).tolist()
    assert np.std(compute_credit("oprl", group, step_rewards=learned).step_part) > 0.9


def test_oprl_reports_how_well_its_step_rewards_rank_the_outcomes():
    """oprl_rank_acc: the share of outcome pairs whose step-reward sums rank them as the outcomes do (ties half),
    a diagnostic of what the PRM knows (0.5: nothing); without the gate the step part is added with alpha."""
    outcomes = [1.0, 1.0, 0.0, 0.0]
    group = [Episode(group_id="g", total_reward=r, turns=[Turn(index=i) for i in range(2)]) for r in outcomes]
    right = [[0.3, 0.1], [0.2, 0.1], [-0.1, 0.0], [0.0, -0.2]]  # sums 0.4, 0.3 > -0.1, -0.2: all 4 pairs
    res = compute_credit("oprl", group, step_rewards=right, alpha=0.5, step_gate="none")
    assert res.scalars == {"oprl_rank_acc": 1.0, "oprl_rank_acc_per_turn": 1.0, "oprl_rank_pairs": 4.0,
                           "oprl_state_acc": 0.5, "oprl_state_pairs": 0.0, "oprl_gate_state": 0.0,
                           "oprl_step_weight": 0.5}
    assert np.allclose(res.advantages, res.episode_part + 0.5 * res.step_part)
    chance = [[0.3, 0.1], [-0.1, -0.2], [0.2, 0.1], [0.0, -0.2]]  # winners 0.4, -0.3; losers 0.3, -0.2: 2 of 4
    assert compute_credit("oprl", group, step_rewards=chance).scalars["oprl_rank_acc"] == 0.5
    backwards = [[-x for x in row] for row in right]
    assert compute_credit("oprl", group, step_rewards=backwards).scalars["oprl_rank_acc"] == 0.0
    ties = compute_credit("oprl", group, step_rewards=[[0.1, 0.1]] * 4)  # every sum equal: each pair half right
    assert ties.scalars["oprl_rank_acc"] == 0.5
    three = [Episode(group_id="h", total_reward=r, turns=[Turn(index=0)]) for r in (1.0, 0.0, 0.0)] + group
    res = compute_credit("oprl", three, step_rewards=[[0.2], [0.1], [0.3]] + right)  # h: 1 of 2; g: 4 of 4
    assert res.scalars["oprl_rank_pairs"] == 6.0 and res.scalars["oprl_rank_acc"] == pytest.approx(5 / 6)
    same = [Episode(group_id="s", total_reward=1.0, turns=[Turn(index=0)]) for _ in range(2)]
    assert compute_credit("oprl", same, step_rewards=[[0.1], [0.2]]).scalars == {
        "oprl_rank_acc": 0.5, "oprl_rank_acc_per_turn": 0.5, "oprl_rank_pairs": 0.0, "oprl_state_acc": 0.5,
        "oprl_state_pairs": 0.0, "oprl_gate_state": 0.0, "oprl_step_weight": 0.0}


def _maze_like_batch(rng: np.random.Generator, groups: int = 8) -> list[Episode]:
    """Groups of 8: 3 successes of 6 turns, 5 failures of 15 (successes are short, as in a maze)."""
    return [Episode(group_id=f"g{g}", total_reward=r, turns=[Turn(index=i) for i in range(6 if r else 15)])
            for g in range(groups) for r in (1.0,) * 3 + (0.0,) * 5]


def test_oprl_adds_the_step_part_only_as_far_as_it_ranks_unseen_outcomes_per_turn():
    """The step part's weight: 0 while the step rewards rank outcomes no better than chance (the outcome
    comparison alone decides, as in GRPO), alpha once they rank every pair of a large batch, and 0 for a
    drift that ranks outcomes by length only (every turn's reward lower by the same amount: the sum ranks the
    short successes first, the mean per turn does not)."""
    rng = np.random.default_rng(1)
    batch = _maze_like_batch(rng)
    noise = [rng.normal(0.0, 0.05, len(e.turns)).tolist() for e in batch]
    res = compute_credit("oprl", batch, step_rewards=noise)
    assert res.scalars["oprl_step_weight"] == 0.0 and np.array_equal(res.advantages, res.episode_part)
    assert np.std(res.step_part) > 0.9  # the step part is still computed and stored, only not added

    drift = [[-0.0625] * len(e.turns) for e in batch]  # exact in binary: every mean per turn is equal
    res = compute_credit("oprl", batch, step_rewards=drift)
    assert res.scalars["oprl_rank_acc"] == 1.0  # the sums rank by length
    assert res.scalars["oprl_rank_acc_per_turn"] == 0.5 and res.scalars["oprl_step_weight"] == 0.0

    knows = [(0.05 * (2 * e.total_reward - 1) + rng.normal(0.0, 0.01, len(e.turns))).tolist() for e in batch]
    res = compute_credit("oprl", batch, step_rewards=knows, alpha=1.0)
    assert res.scalars["oprl_rank_acc_per_turn"] == 1.0
    assert res.scalars["oprl_step_weight"] == pytest.approx(1.0 - 1.645 / np.sqrt(64))  # lcb of 64 episodes
    assert np.allclose(res.advantages, res.episode_part + res.scalars["oprl_step_weight"] * res.step_part)
    few = compute_credit("oprl", batch[:8], step_rewards=knows[:8])  # one group: 8 episodes are weak evidence
    assert few.scalars["oprl_step_weight"] == pytest.approx(max(0.0, 1.0 - 1.645 / np.sqrt(8)))


def _keydoor_like_batch(groups: int = 8) -> list[Episode]:
    """Groups of 8 through states a -> b -> c: at `b` the 3 successes take "left" and the 5 failures "right";
    at `a` everyone takes "go" (one action: nothing to rank); successes end at `c`, failures wander 6 unshared
    states of their own."""
    def episode(g: int, k: int, success: bool) -> Episode:
        steps = [("a", "go"), ("b", "left" if success else "right")]
        steps += [("c", "open")] if success else [(f"g{g}x{k}s{i}", "right") for i in range(6)]
        return Episode(group_id=f"g{g}", total_reward=float(success),
                       turns=[Turn(index=i, state_fingerprint=fp, action_text=a) for i, (fp, a) in enumerate(steps)])

    return [episode(g, k, k < 3) for g in range(groups) for k in range(8)]


def test_oprl_state_gate_asks_whether_the_step_rewards_rank_actions_taken_in_one_state():
    """The default gate (state fingerprints present): the step part is added as far as, at one state, the action
    of the episode that went on to succeed gets the higher step reward; turns of one action are not compared.
    Step rewards that rank whole episodes by their mean per turn (which opened the rank gate on KeyDoor-v0) but
    say nothing at the shared state leave it shut."""
    rng = np.random.default_rng(4)
    batch = _keydoor_like_batch()
    at_b = [[rng.normal(0.0, 0.01) + (0.1 if t.action_text == "left" else -0.1 if t.action_text == "right"
             and t.state_fingerprint == "b" else 0.0) for t in e.turns] for e in batch]
    res = compute_credit("oprl", batch, step_rewards=at_b)
    assert res.scalars["oprl_gate_state"] == 1.0 and res.scalars["oprl_state_acc"] == 1.0
    assert res.scalars["oprl_state_pairs"] == 8 * 3 * 5  # at b only: at a the actions are equal
    assert res.scalars["oprl_step_weight"] == pytest.approx(1.0 - 1.645 / np.sqrt(64))
    assert np.allclose(res.advantages, res.episode_part + res.scalars["oprl_step_weight"] * res.step_part)

    # the successes' own turns rewarded, the shared state b at chance: ranks episodes, not actions
    episodes_only = [[(0.1 if e.total_reward and t.state_fingerprint == "c" else 0.0) + rng.normal(0.0, 0.01)
                      for t in e.turns] for e in batch]
    for name, gate in (("rank", "rank"), ("state", "auto")):
        res = compute_credit("oprl", batch, step_rewards=episodes_only, step_gate=gate)
        assert res.scalars["oprl_gate_state"] == float(name == "state")
        if name == "rank":
            assert res.scalars["oprl_rank_acc_per_turn"] == 1.0 and res.scalars["oprl_step_weight"] > 0.7
        else:
            assert 0.3 < res.scalars["oprl_state_acc"] < 0.7 and res.scalars["oprl_step_weight"] == 0.0
            assert np.array_equal(res.advantages, res.episode_part)

    # without any fingerprint: auto falls back to the rank gate, "state" finds no pairs and adds nothing
    bare = [Episode(group_id=e.group_id, total_reward=e.total_reward,
                    turns=[Turn(index=t.index, action_text=t.action_text) for t in e.turns]) for e in batch]
    auto = compute_credit("oprl", bare, step_rewards=episodes_only)
    assert auto.scalars["oprl_gate_state"] == 0.0 and auto.scalars["oprl_step_weight"] > 0.7
    state = compute_credit("oprl", bare, step_rewards=episodes_only, step_gate="state")
    assert state.scalars["oprl_state_pairs"] == 0.0 and state.scalars["oprl_step_weight"] == 0.0


def test_oprl_step_clip_bounds_the_step_part_of_a_heavy_tailed_prm():
    """A learned PRM's step rewards are heavy-tailed (KeyDoor-v0: a few turns' normalised step parts at 8-10
    standard deviations); `step_clip` bounds each turn's step part before the weight, and leaves the rest."""
    rng = np.random.default_rng(2)
    batch = _maze_like_batch(rng)
    knows = [(0.05 * (2 * e.total_reward - 1) + rng.standard_t(2, len(e.turns)) * 0.02).tolist() for e in batch]
    free = compute_credit("oprl", batch, step_rewards=knows)
    assert np.abs(free.step_part).max() > 3.0  # the tail this guards against
    res = compute_credit("oprl", batch, step_rewards=knows, step_clip=3.0)
    assert np.abs(res.step_part).max() <= 3.0
    inside = np.abs(free.step_part) <= 3.0
    assert np.array_equal(res.step_part[inside], free.step_part[inside])
    assert np.allclose(res.advantages, res.episode_part + res.scalars["oprl_step_weight"] * res.step_part)
    assert res.scalars == free.scalars and res.scalars["oprl_step_weight"] > 0.5  # the gate reads the rewards
    from agentgym.credit.errors import CreditParamError

    with pytest.raises(CreditParamError, match="step_clip=0 must be a finite number"):
        compute_credit("oprl", batch, step_rewards=knows, step_clip=0)


def test_oprl_step_center_leaves_each_episodes_total_to_the_episode_part():
    rng = np.random.default_rng(3)
    batch = _maze_like_batch(rng)
    knows = [(0.05 * (2 * e.total_reward - 1) + rng.normal(0.0, 0.01, len(e.turns))).tolist() for e in batch]
    free = compute_credit("oprl", batch, step_rewards=knows)
    res = compute_credit("oprl", batch, step_rewards=knows, step_center="episode")
    start = 0
    for e in batch:
        n = len(e.turns)
        assert abs(res.step_part[start:start + n].mean()) < 1e-9  # no net credit from the PRM per episode
        assert np.allclose(res.step_part[start:start + n], free.step_part[start:start + n]
                           - free.step_part[start:start + n].mean())
        start += n
    assert np.allclose(res.advantages, res.episode_part + res.scalars["oprl_step_weight"] * res.step_part)
    from agentgym.credit.errors import CreditParamError

    with pytest.raises(CreditParamError, match="step_center"):
        compute_credit("oprl", batch, step_rewards=knows, step_center="group")


def test_oprl_step_std_floor_is_validated():
    group = [Episode(group_id="g", total_reward=r, turns=[Turn(index=0)]) for r in (1.0, 0.0)]
    from agentgym.credit.errors import CreditParamError

    with pytest.raises(CreditParamError, match="step_std_floor=-1.0 must be a finite number"):
        compute_credit("oprl", group, step_rewards=[[0.1], [0.0]], step_std_floor=-1.0)
    with pytest.raises(CreditParamError, match="step_gate"):
        compute_credit("oprl", group, step_rewards=[[0.1], [0.0]], step_gate="sum")


def test_gigpo_one_invalid_turn_in_a_large_same_state_cluster_is_not_blown_up():
    """KeyDoor's collapse on numbers: 8 failed 24-turn episodes stuck in one state (one anchor cluster of 192
    turns) with a single invalid turn. Normalised by the cluster's own tiny std the invalid turn got about
    -sqrt(n - 1) and every other turn a positive share (the loop reinforced); with the floor its step part
    is one penalty's size and the loop's turns get almost nothing."""
    group = [Episode(group_id="g", total_reward=0.0,
                     turns=[Turn(index=i, state_fingerprint="stuck") for i in range(24)]) for _ in range(8)]
    group[3].turns[5].info["error_kind"] = "invalid_action"
    paper = compute_credit("gigpo", group, step_std_floor=0.0)
    assert paper.step_part.min() < -10  # -sqrt(191): larger than any outcome advantage of a group of 8
    res = compute_credit("gigpo", group)
    assert res.step_part.min() == pytest.approx(-1.0, abs=0.01)  # -penalty (1 - 1/n) / floor
    others = np.delete(res.step_part, res.step_part.argmin())
    assert np.abs(others).max() < 0.01
    assert np.all(res.episode_part == 0)  # every outcome equal: no episode signal


def test_gigpo_outcome_step_scale_bounds_one_success_among_many_revisits():
    """KeyDoor's 5-10 step advantages on numbers: one state revisited 20 times by each of 7 looping failures
    and once by the single success (return 0.95^10). Its cluster's own std is the success's alone, so the
    success's turn gets up to sqrt(n); `step_scale="outcome"` divides by at least the group's outcome spread,
    the episode part's divisor, so the step part stays on the episode part's scale."""
    def episode(reward: float, visits: int) -> Episode:
        turns = [Turn(index=i, state_fingerprint="hub" if i < visits else f"s{i}") for i in range(visits + 10)]
        turns[-1].reward = reward
        return Episode(group_id="g", total_reward=reward, turns=turns)

    group = [episode(1.0, 1)] + [episode(0.0, 20) for _ in range(7)]
    own = compute_credit("gigpo", group)
    assert own.step_part.max() > 5  # its cluster std (0.05) is under the floor: 0.6 / 0.1
    scaled = compute_credit("gigpo", group, step_scale="outcome")
    assert 0 < scaled.step_part.max() < scaled.episode_part.max() and scaled.step_part.argmax() == own.step_part.argmax()
    assert np.all(np.sign(scaled.step_part) == np.sign(own.step_part))  # the same order, a bounded size
    with pytest.raises(CreditParamError, match="step_scale='turn' is not one of"):
        compute_credit("gigpo", group, step_scale="turn")


def test_gigpo_step_std_floor_keeps_outcome_spreads_normalised():
    """Turns of one state whose step returns differ by an outcome (spread far above the floor) are normalised
    exactly as in the paper."""
    group = [Episode(group_id="g", total_reward=r, turns=[Turn(index=0, reward=r, state_fingerprint="s")])
             for r in (1.0, 0.0, 0.0, 1.0)]
    assert compute_credit("gigpo", group).step_part == pytest.approx(
        compute_credit("gigpo", group, step_std_floor=0.0).step_part)
