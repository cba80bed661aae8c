"""Branching (TRACE): children share the parent's prefix exactly, via snapshots or action replay."""

from __future__ import annotations

import pytest
from collector_envs import CountingEnv, say_inc

from agentgym.collector import BranchError, Collector, Task
from agentgym.policy.scripted import ScriptedBackend
from agentgym.trajectory import EpisodeStatus


def solver(messages, env):
    """Scripted policy (labelled): the maze's built-in solver."""
    return env.unwrapped.solver_action()


def assert_shares_prefix(parent, child, turn):
    assert child.parent_id == parent.id and child.branch_turn == turn and child.group_id == parent.group_id
    assert [t.to_dict() for t in child.turns[:turn]] == [t.to_dict() for t in parent.turns[:turn]]
    assert child.turns[turn].observation == parent.turns[turn].observation
    assert child.turns[turn].state_fingerprint == parent.turns[turn].state_fingerprint
    assert child.metadata["branch_depth"] == parent.metadata.get("branch_depth", 0) + 1


@pytest.mark.parametrize("snapshots", [True, False], ids=["snapshot", "replay"])
async def test_children_share_the_parent_prefix_exactly(snapshots, tokenizer):
    collector = Collector("Maze-v0", ScriptedBackend(solver, tokenizer=tokenizer), progress=False,
                          record_snapshots=snapshots)
    [parent] = (await collector.collect([Task("easy-7", seed=2)])).episodes
    assert parent.num_turns >= 3
    assert bool(collector._snapshots.get(parent.id)) is snapshots
    children = await collector.branch(parent, 2, k=3)
    assert len(children) == 3 and len({c.id for c in children}) == 3
    for child in children:
        assert_shares_prefix(parent, child, 2)
        # the token context of the branch turn is exactly the parent's
        assert child.turns[2].prompt_ids == parent.turns[2].prompt_ids
        assert child.status == EpisodeStatus.COMPLETE and child.total_reward == 1.0
        assert child.metadata["source"] == "branch"


async def test_branch_of_a_branch_and_text_mode_with_replay():
    collector = Collector(lambda: CountingEnv(goal=5), say_inc, progress=False)
    [parent] = (await collector.collect([Task("t", seed=0)])).episodes
    [child] = await collector.branch(parent, 1, k=1)
    [grandchild] = await collector.branch(child, 3, k=1)
    assert_shares_prefix(parent, child, 1)
    assert_shares_prefix(child, grandchild, 3)
    assert grandchild.metadata["branch_depth"] == 2 and grandchild.total_reward == 1.0


async def test_a_nondeterministic_env_without_snapshots_cannot_branch():
    class Drifting(CountingEnv):
        deterministic = False

        def snapshot(self):
            raise NotImplementedError

    Drifting.supports_snapshot = False
    collector = Collector(lambda: Drifting(goal=3), say_inc, progress=False)
    [parent] = (await collector.collect([Task("t", seed=0)])).episodes
    with pytest.raises(BranchError, match="not deterministic"):
        await collector.branch(parent, 1, k=2)


async def test_replay_divergence_is_reported():
    collector = Collector(lambda: CountingEnv(goal=4), say_inc, progress=False)
    [parent] = (await collector.collect([Task("t", seed=0)])).episodes
    parent.turns[1].observation = "value 42"  # the record no longer matches what the env does
    with pytest.raises(BranchError, match="diverged at turn 1"):
        await collector.branch(parent, 2, k=1)
    with pytest.raises(Exception, match="branch turn must be in"):
        await collector.branch(parent, parent.num_turns, k=1)
