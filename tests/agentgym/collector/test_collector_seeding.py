"""One seed, the same samples: a turn's sampler is seeded from the episode's key (task, task seed, group ordinal,
member index), not its random id or the order concurrent requests reach the model."""

from __future__ import annotations

import pytest
import torch

from agentgym.collector import Collector, CollectorConfig, Task
from agentgym.policy.base import SamplingParams
from agentgym.policy.hf import HFBackend
from agentgym.policy.models import load_model, tiny_model_dir

TASKS = [Task(f"open-{i}", seed=10 + i) for i in range(3)]


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return load_model(tiny_model_dir())


def actions(episodes) -> list[tuple]:
    return [(e.task_id, e.seed, e.metadata["sample_key"], tuple(tuple(t.action_ids) for t in e.turns)) for e in episodes]


async def collect_once(tiny, *, concurrency: int, seed: int | None = 7, group_size: int = 3) -> list:
    model, tokenizer = tiny
    backend = HFBackend(model, tokenizer, seed=0)
    config = CollectorConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=4, seed=seed), max_turns=4,
                             concurrency=concurrency, progress=False)
    collector = Collector("Maze-v0", backend, None, config=config, env_kwargs={"difficulty": "open"})
    try:
        return (await collector.collect(TASKS, group_size=group_size)).episodes
    finally:
        await collector.aclose()
        await backend.aclose()


async def test_two_collections_of_one_seed_sample_the_same_tokens_whatever_the_concurrency(tiny):
    """With 9 requests batched together, then one at a time, then again batched: the same ids per episode key,
    while the members of one group still sample differently."""
    first = actions(await collect_once(tiny, concurrency=9))
    assert [a[2] for a in first] == [f"open-{i}|{10 + i}|{i}|{m}" for i in range(3) for m in range(3)]
    assert first == actions(await collect_once(tiny, concurrency=9))
    assert first == actions(await collect_once(tiny, concurrency=1))
    assert len({a[3] for a in first[:3]}) > 1  # three members of one task: not one sample copied three times
    other_seed = actions(await collect_once(tiny, concurrency=9, seed=8))
    assert [a[3] for a in other_seed] != [a[3] for a in first]


async def test_a_retry_joins_its_group_with_the_next_member_key_and_a_branch_derives_its_key(tiny):
    model, tokenizer = tiny
    backend = HFBackend(model, tokenizer, seed=0)
    config = CollectorConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=4, seed=3), max_turns=4,
                             progress=False, record_snapshots=True)
    collector = Collector("Maze-v0", backend, None, config=config, env_kwargs={"difficulty": "open"})
    try:
        group = (await collector.collect([TASKS[0]], group_size=2)).episodes
        more = (await collector.collect([TASKS[0]], group_size=1, group_id=group[0].group_id)).episodes
        later = (await collector.collect([TASKS[1]], group_size=1)).episodes
        children = await collector.branch(group[0], 1, k=2)
    finally:
        await collector.aclose()
        await backend.aclose()
    assert [e.metadata["sample_key"] for e in group + more + later] == [
        "open-0|10|0|0", "open-0|10|0|1", "open-0|10|0|2", "open-1|11|1|0"]
    assert [c.metadata["sample_key"] for c in children] == [
        "open-0|10|0|0|branch 1|0", "open-0|10|0|0|branch 1|1"]
