"""Back-pressure under load: 256 episodes in flight, an env that becomes 10x slower halfway.

The real collector, rollout driver and data manager; the env is a one-step async env that sleeps, the policy
is scripted (labelled) and the trainer is scripted too (labelled): it pulls a batch and spends a fixed time on
it. Asserted are counts: in flight + queued never past the limit, live episodes bounded, and the stage the
metrics name as the bottleneck: the trainer while the env is fast, the env once it is 10x slower.
"""

from __future__ import annotations

import asyncio
import gc
import random
import threading
import time
from typing import Any

import pytest
from agentgym.trainer.collection import RolloutDriver

from agentgym.collector import Collector
from agentgym.collector.run import EpisodeRun
from agentgym.core import AgentEnv
from agentgym.cost import totals
from agentgym.data import Curation, DataManager
from agentgym.data.meters import StageWindow, bottleneck_name
from agentgym.trajectory import Episode

LIMIT = 256  #: episodes in flight + queued
BATCH_GROUPS, GROUP = 4, 4
TRAIN_S = 0.25  #: the scripted trainer's time per batch: 64 episodes/s
FAST_S, SLOW_S = 1.0, 10.0  #: the env step: 256 in flight give 256/s, then 25.6/s (under the trainer's 64/s)


class SleepyEnv(AgentEnv):
    """One step that takes about `SleepyEnv.step_s` (0.5-1.5x, seeded: episodes do not all end together; awaited,
    so 256 of them cost no threads); reward 0 or 1."""

    step_s = FAST_S

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.seed = seed or 0
        return "say done", {"task_id": "t"}

    def step(self, action: str):
        raise AssertionError("astep is used")

    async def astep(self, action: str):
        await asyncio.sleep(SleepyEnv.step_s * random.Random(self.seed).uniform(0.5, 1.5))
        self.seed += 1
        return "done", float(self.seed % 2), True, False, {}


def count_live(kind: type) -> int:
    gc.collect()
    return sum(isinstance(o, kind) for o in gc.get_objects())


class ScriptedTrainer(threading.Thread):
    """Scripted trainer (labelled): pull a batch, spend TRAIN_S, record the stage metrics of the window."""

    def __init__(self, dm: DataManager, driver: RolloutDriver, stop: asyncio.Event, loop: asyncio.AbstractEventLoop):
        super().__init__(daemon=True)
        self.dm, self.driver, self.stop, self.loop = dm, driver, stop, loop
        self.rows: list[dict[str, Any]] = []
        self.peaks = {"in_flight_plus_queued": 0, "in_flight": 0, "episode_runs": 0, "episodes": 0}
        self.slow_from: int | None = None

    def run(self) -> None:
        try:
            self._train()
        finally:
            self.loop.call_soon_threadsafe(self.stop.set)

    def _train(self) -> None:
        last, last_wait, window = time.perf_counter(), 0.0, StageWindow()
        while len(self.rows) < 100:
            batch = self.dm.pull(timeout=120)
            assert batch is not None, "the trainer starved for 120 s"
            time.sleep(TRAIN_S)
            now, m = time.perf_counter(), self.dm.metrics()
            costs = totals(self.driver.take_tally().costs)
            row = window.add(now - last, m.trainer_wait_s - last_wait,
                             {"policy": costs["policy_s"], "env": costs["env_s"], "queue": costs["queue_s"]})
            self.rows.append({**row, "in_flight": m.in_flight, "queued": m.queue_depth})
            self.peaks["in_flight_plus_queued"] = max(self.peaks["in_flight_plus_queued"], m.in_flight + m.queue_depth)
            self.peaks["in_flight"] = max(self.peaks["in_flight"], m.in_flight)
            if len(self.rows) in (6, 30) or self._env_bound(3):  # a few heap counts, outside the timed windows
                self.peaks["episode_runs"] = max(self.peaks["episode_runs"], count_live(EpisodeRun))
                self.peaks["episodes"] = max(self.peaks["episodes"], count_live(Episode))
                if self._env_bound(3):
                    return
            if len(self.rows) == 6:
                SleepyEnv.step_s, self.slow_from = SLOW_S, len(self.rows)
            last, last_wait = time.perf_counter(), self.dm.metrics().trainer_wait_s

    def _env_bound(self, n: int) -> bool:
        names = [bottleneck_name(r) for r in self.rows[self.slow_from or len(self.rows):]]
        return len(names) >= n and names[-n:] == ["env"] * n


@pytest.mark.slow
async def test_256_in_flight_with_an_env_10x_slower_halfway_stays_bounded_and_names_the_bottleneck():
    SleepyEnv.step_s = FAST_S
    before = {"episode_runs": count_live(EpisodeRun), "episodes": count_live(Episode)}  # earlier tests' leftovers
    dm = DataManager(batch_groups=BATCH_GROUPS, group_size=GROUP, staleness_bound=None, max_in_flight=LIMIT,
                     curation=Curation(drop_zero_variance=False))
    collector = Collector(SleepyEnv, lambda messages: "done", None, progress=False, concurrency=LIMIT, max_turns=1)
    driver = RolloutDriver(collector, dm, ["t"], seed=0, success_reward=1.0)
    stop = asyncio.Event()
    trainer = ScriptedTrainer(dm, driver, stop, asyncio.get_running_loop())
    trainer.start()
    await driver.produce(stop)
    trainer.join(timeout=30)
    await collector.aclose()
    assert not driver.failures
    names = [bottleneck_name(r) for r in trainer.rows]
    # while the env is fast the trainer limits the run (it never waits: back-pressure holds the collectors) ...
    assert names[1:6] == ["trainer"] * 5, trainer.rows[:6]
    # ... and once the env is 10x slower the metrics name the env
    assert names[-3:] == ["env"] * 3, trainer.rows[-6:]
    assert all(r["stage/env_share"] > 0.5 for r in trainer.rows[-3:])
    # bounded: the limit holds, it was reached, and the heap never held more episodes than it allows
    assert trainer.peaks["in_flight_plus_queued"] <= LIMIT and trainer.peaks["in_flight"] >= LIMIT - GROUP
    assert trainer.peaks["episode_runs"] - before["episode_runs"] <= LIMIT
    # in flight or queued (the limit), the batch being trained, the task's last success kept for mixing in
    assert trainer.peaks["episodes"] - before["episodes"] <= LIMIT + BATCH_GROUPS * GROUP + 1, (trainer.peaks, before)


async def test_a_producer_that_can_never_get_room_fails_with_a_clear_error(monkeypatch):
    """Groups that cannot complete hold the in-flight limit and nothing runs: the producer raises (after a grace
    period) instead of waiting forever, and names the groups."""
    from agentgym.trainer import collection

    monkeypatch.setattr(collection, "STALL_GRACE_S", 0.05)
    dm = DataManager(batch_groups=1, group_size=4, staleness_bound=None, max_in_flight=4)
    for reward in (0.0, 1.0, 0.0):  # three of a group of four; its fourth will never come
        dm.push(Episode(group_id="x", task_id="t", total_reward=reward), acquired=False)
    collector = Collector(SleepyEnv, lambda messages: "done", None, progress=False, concurrency=4, max_turns=1)
    driver = RolloutDriver(collector, dm, ["t"], seed=0, success_reward=1.0)
    with pytest.raises(collection.CollectionStalled, match="held by 3 queued episodes"):
        await asyncio.wait_for(driver.produce(asyncio.Event()), timeout=30)
    await collector.aclose()
