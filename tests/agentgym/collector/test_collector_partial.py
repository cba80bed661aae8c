"""Partial rollouts (APRIL): rounds stop early, nothing is lost, every token keeps its policy version.

The policy is a labelled simulation (`SimulatedBackend`): long-tailed generation
lengths at a fixed time per token, abortable mid-turn.
"""

from __future__ import annotations

import random

from collector_envs import CountingEnv, say_inc

from agentgym.collector import Collector, Task
from agentgym.policy.scripted import SimulatedBackend
from agentgym.store import TrajectoryStore
from agentgym.trajectory import EpisodeStatus


def long_tailed(rng: random.Random) -> int:
    return 300 if rng.random() < 0.25 else 4


async def run_rounds(collector, tasks, target, group_size):
    source = iter(tasks)
    rounds = []
    while True:
        result = await collector.collect_round(source, target_groups=target, group_size=group_size)
        rounds.append(result)
        collector.policy.update_weights(None)  # the trainer would push new weights here
        if not collector.buffer and not result.groups and not result.partial:
            return rounds


async def test_no_episode_is_lost_across_rounds_and_versions_are_kept(sqlite_url):
    store = TrajectoryStore(sqlite_url)
    policy = SimulatedBackend(say_inc, long_tailed, token_seconds=2e-4, seed=1)
    collector = Collector(lambda: CountingEnv(goal=4), policy, store, progress=False, concurrency=64)
    tasks = [Task(f"t{i}", seed=i) for i in range(12)]
    rounds = await run_rounds(collector, tasks, target=2, group_size=3)

    finished = [g for r in rounds for g in r.groups]
    assert sorted(g[0].task_id for g in finished) == sorted(t.task_id for t in tasks)  # every task, once
    assert all(len(g) == 3 and len({e.group_id for e in g}) == 1 for g in finished)
    episodes = [e for g in finished for e in g]
    assert len({e.id for e in episodes}) == 36
    assert all(e.status == EpisodeStatus.COMPLETE and e.total_reward == 1.0 for e in episodes)
    assert any(r.partial for r in rounds[:-1])  # some rounds did stop with work in flight
    resumed = [e for e in episodes if len(e.metadata["rounds"]) > 1]
    assert resumed
    mixed_turns = 0
    for episode in episodes:
        versions = [v for t in episode.turns for v in t.token_versions]
        assert versions == sorted(versions)  # non-decreasing along the sequence
        for turn in episode.turns:
            assert len(turn.action_ids) == len(turn.token_versions) == len(turn.action_logprobs)
            mixed_turns += len(set(turn.token_versions)) > 1
        assert episode.metadata["finish_round"] >= episode.metadata["start_round"]
    assert mixed_turns > 0  # a turn aborted mid-generation was continued under the next version
    assert store.count() == 36 and store.count(status="partial") == 0


async def test_the_buffer_is_served_first_and_stale_tokens_can_be_masked():
    policy = SimulatedBackend(say_inc, long_tailed, token_seconds=2e-4, seed=3)
    collector = Collector(lambda: CountingEnv(goal=4), policy, progress=False, mask_stale_tokens=True)
    source = iter([Task(f"t{i}", seed=i) for i in range(40)])
    first = await collector.collect_round(source, target_groups=2, group_size=2)
    buffered = {g.id for g in collector.buffer}
    assert first.partial > 0 and buffered
    assert all(r.episode.status == EpisodeStatus.PARTIAL for g in collector.buffer for r in g.runs
               if not r.finished)
    policy.update_weights(None)
    second = await collector.collect_round(source, target_groups=len(buffered), group_size=2, over_provision=1)
    assert {g[0].group_id for g in second.groups} == buffered and not collector.buffer
    resumed = [e for g in second.groups for e in g if len(e.metadata["rounds"]) > 1]
    assert resumed
    for episode in resumed:
        for turn in episode.turns:
            assert turn.loss_mask == [int(v == policy.version) for v in turn.token_versions]
