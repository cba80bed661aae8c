"""TRACE: tree layouts, nested branches, the allocation policy and its online predictors."""

from __future__ import annotations

import numpy as np
import pytest

from agentgym import Episode, Turn
from agentgym.credit import (
    BetaPosterior,
    BranchRequest,
    Prefix,
    PrefixPredictor,
    TraceAllocator,
    compute_advantages,
    compute_credit,
)
from agentgym.credit.trace_alloc import TreeView
from tests.helpers.table_predictor import TablePredictor


def node(eid, outcome, n, parent=None, k=None, *, copies=False, group="x", status="complete"):
    first = 0 if copies or k is None else k
    count = n + (k if copies and k else 0)
    return Episode(id=eid, group_id=group, task_id=group, total_reward=outcome, parent_id=parent, branch_turn=k,
                   status=status, turns=[Turn(index=first + i, state_fingerprint=f"{eid}{first + i}",
                                              observation=f"state {first + i}") for i in range(count)])


def test_branches_holding_prefix_copies_match_branches_holding_own_turns():
    own = [node("r", 1, 3), node("a", 0, 2, "r", 1), node("b", 0, 1, "r", 2)]
    copied = [node("r", 1, 3), node("a", 0, 2, "r", 1, copies=True), node("b", 0, 1, "r", 2, copies=True)]
    adv_own = compute_advantages("trace", own)
    adv_copy = compute_credit("trace", copied, shared_prefix="copy").per_episode()
    assert adv_copy[1][1:] == adv_own[1] and adv_copy[2][2:] == adv_own[2]
    assert adv_copy[1][:1] == adv_own[0][:1] and adv_copy[2][:2] == adv_own[0][:2]
    skipped = compute_credit("trace", copied)
    assert skipped.per_episode()[2][:2] == [0.0, 0.0] and skipped.trained.tolist()[6:8] == [False, False]


def test_nested_branches_and_branch_of_a_branch():
    # r: 4 turns, R=0; a forks r at 2 (R=1); b forks a at 3 (R=1): node (a,3) = mean(1, 1) = 1
    eps = [node("r", 0, 4), node("a", 1, 3, "r", 2), node("b", 1, 1, "a", 3)]
    adv = compute_advantages("trace", eps)
    v_r2 = (0 + 1) / 2  # node (r, 2): children r's continuation (0) and a's start value (1)
    assert np.allclose(adv[0], [0.0, 0.0, 0 - v_r2, 0 - v_r2])  # root value = start of r = v_r2
    assert np.allclose(adv[1], [1 - v_r2, 0.0, 0.0])  # a: [2,3) to node (a,3)=1, then [3,5) to leaf 1
    assert np.allclose(adv[2], [0.0])


def test_branch_at_turn_zero_is_another_root_and_fork_at_an_inherited_turn_moves_up():
    eps = [node("r", 1, 2), node("z", 0, 2, "r", 0), node("a", 0, 3, "r", 1), node("b", 1, 1, "a", 1)]
    adv = compute_credit("trace", eps)
    # b forks a at turn 1, which a shares with r: b hangs under node (r, 1) with a and r's continuation
    v_r1 = (1 + 0 + 1) / 3
    v_root = (v_r1 + 0) / 2
    rows = adv.per_episode()
    assert np.allclose(rows[0], [v_r1 - v_root, 1 - v_r1])
    assert np.allclose(rows[1], [0 - v_root] * 2)
    assert np.allclose(rows[3], [1 - v_r1])


def test_normalize_std_divides_by_the_group_outcome_std():
    eps = [node("r", 1, 2), node("s", 0, 2), node("a", 0, 1, "r", 1)]
    plain = compute_credit("trace", eps).advantages
    scaled = compute_credit("trace", eps, normalize_std=True).advantages
    assert np.allclose(scaled, plain / (np.std([1, 0, 0], ddof=1) + 1e-6))


# ---- allocation -------------------------------------------------------------------------------
def test_plan_spends_the_budget_greedily_and_leftover_on_roots():
    roots = [node("a", 1, 4), node("b", 0, 4, group="y")]
    table = {"a1": 0.5, "a2": 0.3, "b3": 0.9, "a3": 1.0, "b1": 0.0}
    plan = TraceAllocator(TablePredictor(table), k=2).plan(roots, budget=7)
    branches = [(r.episode_id, r.turn) for r in plan if r.turn > 0]
    assert branches == [("a", 1), ("a", 2), ("b", 3)]
    assert sum(r.k for r in plan) == 7
    assert [r for r in plan if r.turn == 0] == [BranchRequest("a", 0, 1, "x", 0.0, 0.0)]


def test_plan_never_branches_certain_prefixes_terminal_turns_or_unfinished_episodes():
    eps = [node("a", 1, 3), node("p", 0, 3, status="partial", group="y")]
    plan = TraceAllocator(TablePredictor({"a1": 1.0, "a2": 0.0, "p1": 0.5}), k=2).plan(eps, budget=4)
    assert all(r.turn == 0 for r in plan)  # only leftover root rollouts of the finished group
    assert sum(r.k for r in plan) == 4 and {r.group_id for r in plan} == {"x"}
    assert TraceAllocator(TablePredictor({}), k=2).plan(eps, budget=0) == []


def test_branches_of_a_tree_are_candidates_only_on_their_own_turns():
    eps = [node("r", 0, 3), node("a", 1, 3, "r", 1)]
    allocator = TraceAllocator(TablePredictor({}, default=0.5), k=2)
    cands = [(eps[e].id, k) for e, k, _ in allocator.candidates(TreeView(eps))]
    assert cands == [("r", 1), ("r", 2), ("a", 2), ("a", 3)]


def test_plan_roots_prefers_tasks_with_uncertain_success():
    posterior = BetaPosterior()
    posterior.update("easy", 9, 10)
    posterior.update("hard", 0, 10)
    posterior.update("mixed", 5, 10)
    plan = TraceAllocator(posterior=posterior).plan_roots(["easy", "hard", "mixed", "new"], budget=10, n_root=4)
    assert [(r.task_key, r.n) for r in plan] == [("mixed", 4), ("new", 4), ("easy", 2)]


def test_beta_posterior_decay_and_round_trip():
    post = BetaPosterior(decay=0.5)
    post.update("t", 1, 1)
    post.update("t", 0, 1)
    assert post.params["t"] == (0.5 * (0.5 * 1 + 1) + 0, 0.5 * (0.5 * 1 + 0) + 1)
    again = BetaPosterior()
    again.load_state_dict(post.state_dict())
    assert again.mean("t") == post.mean("t")
    with pytest.raises(ValueError, match="decay"):
        BetaPosterior(decay=0.0)


def test_observe_trains_the_prefix_predictor_towards_outcomes():
    good = [node(f"g{i}", 1, 3, group=f"good{i}") for i in range(4)]
    bad = [node(f"b{i}", 0, 3, group=f"bad{i}") for i in range(4)]
    for ep in good:
        for t in ep.turns:
            t.observation = "near the goal"
    allocator = TraceAllocator(PrefixPredictor(), warmup=0)
    for _ in range(20):
        stats = allocator.observe(good + bad)
    assert stats.n_leaves == 8 and stats.n_prefixes == 24
    probe_good = Prefix("unseen", (), Turn(observation="near the goal"))
    probe_bad = Prefix("unseen", (), Turn(observation="state 0"))
    p_good, p_bad = allocator.p_hat([probe_good, probe_bad])
    assert p_good > 0.6 and p_bad < 0.4
    restored = TraceAllocator(PrefixPredictor(), warmup=0)
    restored.load_state_dict(allocator.state_dict())
    assert np.allclose(restored.p_hat([probe_good, probe_bad]), [p_good, p_bad])


def test_unwarmed_predictor_falls_back_to_the_task_posterior():
    allocator = TraceAllocator(PrefixPredictor(), warmup=1000)
    allocator.observe([node("a", 1, 2), node("b", 1, 2), node("c", 0, 2)])
    assert allocator.p_hat([Prefix("x", (), None)])[0] == pytest.approx((1 + 2) / (2 + 3))
    with pytest.raises(ValueError, match="k >= 2"):
        TraceAllocator(k=1)


def _repeating_tree(g):
    """4 roots with mixed outcomes, each branched once at turn 1 into 2 children that end like their parent
    (a nearly deterministic policy: branching repeats the parent, more roots compare)."""
    roots = [node(f"{g}r{i}", i % 2, 3, group=g) for i in range(4)]
    kids = [node(f"{g}r{i}c{j}", i % 2, 2, f"{g}r{i}", 1, group=g) for i in range(2) for j in range(2)]
    return roots + kids


def test_calibrated_allocation_learns_that_branches_repeat_and_spends_on_roots():
    allocator = TraceAllocator(TablePredictor({}, default=0.5), k=2, mix_warmup=40)
    assert not allocator.calibrated  # before: I_k(p_hat) = 0.5 on every prefix, so prefixes only
    assert all(r.turn > 0 for r in allocator.plan(_repeating_tree("g")[:4], budget=4))
    for i in range(30):
        stats = allocator.observe(_repeating_tree(f"g{i}"))
    assert (stats.branch_points, stats.branch_mixed) == (2, 0)  # both branch points repeated their parent
    assert allocator.calibrated
    plan = allocator.plan(_repeating_tree("new")[:4], budget=4)
    assert plan[0].turn == 0 and plan[0].k == 2 and plan[0].score > 0.6  # the root: its rollouts differ
    assert all(r.score < 0.4 for r in plan if r.turn > 0)  # branches: they repeat (the mix model learned it)
    restored = TraceAllocator(TablePredictor({}, default=0.5), k=2, mix_warmup=40)
    restored.load_state_dict(allocator.state_dict())
    assert restored.calibrated and restored.plan(_repeating_tree("new")[:4], budget=4) == plan
    old = {key: v for key, v in allocator.state_dict().items() if not key.startswith("mix")}
    fresh = TraceAllocator(TablePredictor({}, default=0.5), k=2)
    fresh.load_state_dict(old)  # a checkpoint from before the mixed-outcome model: it starts afresh
    assert not fresh.calibrated
    never = TraceAllocator(TablePredictor({}, default=0.5), k=2, mix_warmup=None)  # trace_calibrated: false
    never.load_state_dict(allocator.state_dict())
    assert not never.calibrated and all(r.turn > 0 for r in never.plan(_repeating_tree("new")[:4], budget=4))


def test_observe_counts_mixed_branch_points():
    eps = [node("r", 1, 3), node("a", 0, 2, "r", 1), node("b", 1, 2, "r", 1), node("c", 1, 1, "r", 2),
           node("d", 1, 1, "r", 2)]
    stats = TraceAllocator(TablePredictor({}), k=2).observe(eps)
    assert (stats.branch_points, stats.branch_mixed) == (2, 1)
