"""Property tests (hypothesis) for every estimator: finite outputs, zero advantages for all-equal
outcomes, permutation equivariance inside groups, invariance to a constant added to a group's outcomes.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentgym import Episode, Turn
from agentgym.credit import ESTIMATORS, compute_credit

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
REWARD = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
TURN_REWARD = st.sampled_from([0.0, 0.0, 0.0, 1.0, 0.5, -1.0])


@st.composite
def flat_episode(draw, group: str, max_turns: int = 8) -> Episode:
    n = draw(st.integers(0, max_turns))
    turns = [Turn(index=i, reward=draw(TURN_REWARD), state_fingerprint=draw(st.sampled_from("ABCDE")),
                  observation=draw(st.sampled_from(["room one", "room two", "hall"])),
                  info={} if draw(st.booleans()) or i % 2 else {"error_kind": "malformed_action"})
             for i in range(n)]
    return Episode(group_id=group, turns=turns, total_reward=draw(REWARD))


@st.composite
def tree_group(draw, group: str) -> list[Episode]:
    """Roots plus branches forked at random turns of random earlier episodes (own turns only)."""
    eps = [draw(flat_episode(group)) for _ in range(draw(st.integers(1, 4)))]
    lengths = {e.id: len(e.turns) for e in eps}
    for _ in range(draw(st.integers(0, 3))):
        parent = draw(st.sampled_from(eps))
        k = draw(st.integers(0, lengths[parent.id]))
        own = draw(st.integers(0, 4))
        child = Episode(group_id=group, parent_id=parent.id, branch_turn=k, total_reward=draw(REWARD),
                        turns=[Turn(index=k + i, state_fingerprint="A", reward=0.0) for i in range(own)])
        lengths[child.id] = k + own
        eps.append(child)
    return eps


@st.composite
def batches(draw, trees: bool = False) -> list[Episode]:
    out: list[Episode] = []
    for g in range(draw(st.integers(1, 3))):
        if trees:
            out.extend(draw(tree_group(f"g{g}")))
        else:
            out.extend(draw(flat_episode(f"g{g}")) for _ in range(draw(st.integers(1, 5))))
    return out


def inputs(name: str, episodes: list[Episode], seed: int = 0) -> dict:
    """Per-turn learned/critic inputs, derived deterministically from each turn (so they permute along)."""
    def per_turn(scale):
        return [[scale * ((hash((e.id, t.index)) % 1000) / 500.0 - 1.0) for t in e.turns] for e in episodes]

    return {"gae": {"values": per_turn(1.0)}, "spa": {"values": per_turn(1.0), "contributions": per_turn(0.3)},
            "oprl": {"step_rewards": per_turn(0.1)}, "trace": {"require_tree": False}}.get(name, {})


FLAT_ESTIMATORS = [n for n in ESTIMATORS]
GROUP_RELATIVE = [n for n in ESTIMATORS if ESTIMATORS[n].group_relative]


def run(name, episodes, **extra):
    return compute_credit(name, episodes, **inputs(name, episodes), **extra)


@SETTINGS
@given(batches())
def test_every_estimator_gives_finite_advantages_of_the_right_shape(episodes):
    for name in FLAT_ESTIMATORS:
        result = run(name, episodes)
        rows = result.per_episode()
        assert [len(r) for r in rows] == [len(e.turns) for e in episodes], name
        assert np.all(np.isfinite(result.advantages)), name
        if result.returns is not None:
            assert np.all(np.isfinite(result.returns)), name


@SETTINGS
@given(batches(trees=True))
def test_trace_on_random_trees_is_finite(episodes):
    result = compute_credit("trace", episodes, require_tree=False)
    assert np.all(np.isfinite(result.advantages))
    assert [len(r) for r in result.per_episode()] == [len(e.turns) for e in episodes]


@SETTINGS
@given(batches(trees=True), REWARD)
def test_trace_all_equal_leaves_give_zero(episodes, value):
    for e in episodes:
        e.total_reward = value
    assert np.all(compute_credit("trace", episodes, require_tree=False).advantages == 0.0)


@SETTINGS
@given(batches(), REWARD)
def test_all_equal_outcomes_give_zero_group_relative_advantages(episodes, value):
    for e in episodes:
        e.total_reward = value
        for t in e.turns:
            t.reward, t.info = 0.0, {}
    for name in GROUP_RELATIVE:
        extra = {"step_rewards": [[0.25] * len(e.turns) for e in episodes]} if name == "oprl" else {}
        result = compute_credit(name, episodes, **{**inputs(name, episodes), **extra})
        assert np.all(result.advantages == 0.0), name
        if result.episode_part is not None:
            assert np.all(result.episode_part == 0.0), name


@SETTINGS
@given(batches(), st.randoms(use_true_random=False))
def test_permuting_episodes_permutes_the_outputs(episodes, rnd):
    order = list(range(len(episodes)))
    rnd.shuffle(order)
    shuffled = [episodes[i] for i in order]
    for name in FLAT_ESTIMATORS:
        base = run(name, episodes).per_episode()
        again = run(name, shuffled).per_episode()
        for new_pos, old_pos in enumerate(order):
            assert np.allclose(again[new_pos], base[old_pos], atol=1e-9), name


@SETTINGS
@given(batches(trees=True), st.randoms(use_true_random=False))
def test_permuting_tree_episodes_permutes_trace_outputs(episodes, rnd):
    order = list(range(len(episodes)))
    rnd.shuffle(order)
    base = compute_credit("trace", episodes, require_tree=False).per_episode()
    again = compute_credit("trace", [episodes[i] for i in order], require_tree=False).per_episode()
    for new_pos, old_pos in enumerate(order):
        assert np.allclose(again[new_pos], base[old_pos], atol=1e-9)


@SETTINGS
@given(batches(), st.floats(-1e3, 1e3, allow_nan=False))
def test_constant_added_to_a_group_leaves_relative_advantages_unchanged(episodes, shift):
    before = {n: run(n, episodes) for n in ("grpo", "rloo", "dr_grpo", "gigpo")}
    for e in episodes:
        if e.group_id == "g0":
            e.total_reward += shift
    for name in ("grpo", "rloo", "dr_grpo"):
        assert np.allclose(run(name, episodes).advantages, before[name].advantages, atol=1e-6), name
    assert np.allclose(run("gigpo", episodes).episode_part, before["gigpo"].episode_part, atol=1e-6)


@SETTINGS
@given(batches(trees=True), st.floats(-1e3, 1e3, allow_nan=False))
def test_constant_added_to_a_tree_leaves_trace_unchanged(episodes, shift):
    before = compute_credit("trace", episodes, require_tree=False).advantages
    for e in episodes:
        e.total_reward += shift
    assert np.allclose(compute_credit("trace", episodes, require_tree=False).advantages, before, atol=1e-6)


@SETTINGS
@given(batches())
def test_rloo_is_scaled_dr_grpo_and_trace_without_branches_is_dr_grpo(episodes):
    dr = run("dr_grpo", episodes)
    sizes = dr.batch.group_sizes[dr.batch.group_of_turn]
    scale = np.where(sizes > 1, sizes / np.maximum(sizes - 1, 1), 0.0)
    assert np.allclose(run("rloo", episodes).advantages, dr.advantages * scale, atol=1e-9)
    assert np.allclose(run("trace", episodes).advantages, dr.advantages, atol=1e-9)


def test_single_episode_groups_and_empty_batches():
    lone = [Episode(group_id=f"g{i}", total_reward=float(i), turns=[Turn(index=0, state_fingerprint="A")])
            for i in range(3)]
    for name in FLAT_ESTIMATORS:
        result = run(name, lone)
        assert np.all(np.isfinite(result.advantages))
        if ESTIMATORS[name].group_relative:
            assert np.all(result.advantages == 0.0), name
        assert run(name, []).per_episode() == []


def test_very_long_episodes_stay_finite():
    rng = np.random.default_rng(0)
    long = [Episode(group_id="g", turns=[Turn(index=i, reward=float(rng.random() < 0.01), state_fingerprint=str(i % 7))
                                         for i in range(n)]).finish() for n in (5000, 3, 0, 1200)]
    for name in FLAT_ESTIMATORS:
        result = run(name, long)
        assert np.all(np.isfinite(result.advantages)), name
        if result.returns is not None:
            assert np.all(np.isfinite(result.returns)), name
