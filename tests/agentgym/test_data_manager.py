"""The data manager: grouping, staleness, curation, infra failures, backpressure, cursor, meters."""

from __future__ import annotations

import asyncio
import threading

import pytest

from agentgym.data import (
    Curation,
    Cursor,
    DataManager,
    dynamic_rollouts,
    mix_in_success,
    select_high_entropy_steps,
    zero_variance,
)
from agentgym.trajectory import Episode, EpisodeStatus, Failure, Turn


def ep(group: str, reward: float, version: int = 0, task: str = "t0", failure: Failure | None = None,
       created: float | None = None) -> Episode:
    e = Episode(group_id=group, task_id=task, total_reward=reward, policy_version=version, failure=failure,
                status=EpisodeStatus.ERROR if failure else EpisodeStatus.COMPLETE,
                turns=[Turn(index=0, prompt_ids=[1, 2], action_ids=[3], action_logprobs=[-0.1],
                            token_versions=[version])])
    if created is not None:
        e.created_at = created
    return e


def push_group(dm: DataManager, gid: str, rewards, version=0, task="t0"):
    eps = [ep(gid, r, version, task) for r in rewards]
    for e in eps:
        dm.push(e, acquired=False)
    return eps


# ---- docs/algorithms.md section 4 worked examples ------------------------------------------------

@pytest.mark.parametrize("sr, n", [(0.5, 8), (0.75, 5), (0.9, 3), (1.0, 2), (None, 8), (0.0, 8)])
def test_dart_dynamic_rollouts(sr, n):
    assert dynamic_rollouts(sr, n_min=1, n_max=8, threshold=0.6) == n


def test_dart_entropy_filter():
    keep = select_high_entropy_steps([0.2, 1.5, 0.9, 0.1, 0.7], 0.6)
    assert keep == [False, True, True, False, True]


def test_zero_variance_and_mix_in():
    assert zero_variance([1.0, 1.0]) and not zero_variance([0.0, 1.0])
    old, new = ep("g", 0.0, created=1.0), ep("g", 0.0, created=2.0)
    success = ep("other", 1.0)
    mixed = mix_in_success([new, old], success, is_success=lambda e: e.total_reward >= 1)
    assert mixed[0] is new and mixed[1].total_reward == 1.0 and mixed[1].group_id == "g"
    assert mixed[1].metadata["source"] == "replayed" and mixed[1].id != success.id
    assert mix_in_success([new, old], None, is_success=lambda e: e.total_reward >= 1) is None


# ---- the queue ---------------------------------------------------------------------------------

def test_groups_train_only_when_complete_and_batches_are_fixed_size():
    dm = DataManager(batch_groups=2, group_size=3, staleness_bound=None)
    push_group(dm, "a", [0, 1, 0])
    push_group(dm, "b", [1, 1])  # incomplete
    assert dm.pull(timeout=0.05) is None
    push_group(dm, "b", [0])
    batch = dm.pull(timeout=1)
    assert batch is not None and batch.group_ids == ["a", "b"] and len(batch.episodes) == 6
    assert batch.weights == [1.0] * 6 and batch.index == 0


def test_zero_variance_groups_are_dropped_and_refilled_by_later_groups():
    dm = DataManager(batch_groups=1, group_size=2, staleness_bound=None)
    push_group(dm, "flat", [1, 1])
    assert dm.pull(timeout=0.05) is None
    push_group(dm, "ok", [0, 1])
    assert dm.pull(timeout=1).group_ids == ["ok"]
    assert dm.metrics().dropped == {"zero_variance": 2}
    off = DataManager(batch_groups=1, group_size=2, curation=Curation(drop_zero_variance=False))
    push_group(off, "flat", [1, 1])
    assert off.pull(timeout=1).group_ids == ["flat"]


def test_staleness_bound_drops_or_down_weights():
    dm = DataManager(batch_groups=1, group_size=2, staleness_bound=1, stale="drop")
    push_group(dm, "old", [0, 1], version=0)
    push_group(dm, "new", [0, 1], version=2)
    batch = dm.pull(version=2, timeout=1)
    assert batch.group_ids == ["new"] and dm.metrics().dropped == {"stale": 2}
    dw = DataManager(batch_groups=1, group_size=2, staleness_bound=1, stale="downweight", stale_decay=0.5)
    push_group(dw, "old", [0, 1], version=0)
    batch = dw.pull(version=3, timeout=1)
    assert batch.staleness == [3, 3] and batch.weights == [0.25, 0.25]
    assert dw.metrics().staleness_histogram == {3: 2} and dw.metrics().max_staleness == 3


def test_staleness_uses_the_oldest_token_version():
    dm = DataManager(batch_groups=1, group_size=2, staleness_bound=0)
    a, b = ep("g", 0.0, version=5), ep("g", 1.0, version=5)
    b.turns[0].token_versions = [4]  # a partial rollout that started under version 4
    dm.push(a, acquired=False)
    dm.push(b, acquired=False)
    assert dm.pull(version=5, timeout=0.05) is None and dm.metrics().dropped == {"stale": 2}


def test_infra_failures_are_retried_never_trained_as_zero_reward():
    dm = DataManager(batch_groups=1, group_size=3, infra="retry", staleness_bound=None)
    good = push_group(dm, "g", [1, 0])
    failed = ep("g", 0.0, failure=Failure.INFRA)
    dm.push(failed, acquired=False)
    assert dm.pull(timeout=0.05) is None
    (retry,) = dm.take_retries()
    assert retry.group_id == "g" and retry.failed_episode_id == failed.id and dm.take_retries() == []
    dm.push(ep("g", 1.0), acquired=False)
    batch = dm.pull(timeout=1)
    assert failed.id not in {e.id for e in batch.episodes} and len(batch.episodes) == 3
    assert {e.id for e in good} <= {e.id for e in batch.episodes}


def test_infra_failures_can_be_masked_instead():
    dm = DataManager(batch_groups=1, group_size=3, infra="mask", staleness_bound=None)
    push_group(dm, "g", [1, 0])
    dm.push(ep("g", 0.0, failure=Failure.INFRA), acquired=False)
    batch = dm.pull(timeout=1)
    assert len(batch.episodes) == 2 and all(e.failure is None for e in batch.episodes)
    assert dm.take_retries() == [] and dm.metrics().infra_failures == 1


def test_adaptive_rollouts_follow_observed_success():
    dm = DataManager(batch_groups=1, group_size=4, curation=Curation(adaptive_rollouts=True, rollouts_max=8))
    assert dm.rollouts_for("easy") == 8  # unseen
    push_group(dm, "g", [1, 1, 1, 0], task="easy")
    assert dm.success_rate("easy") == 0.75 and dm.rollouts_for("easy") == 5
    fixed = DataManager(batch_groups=1, group_size=4)
    assert fixed.rollouts_for("easy") == 4


def test_stored_successes_are_mixed_into_rarely_solved_tasks():
    dm = DataManager(batch_groups=1, group_size=2, staleness_bound=None,
                     curation=Curation(mix_successes=True, rare_success_rate=0.3))
    push_group(dm, "g1", [1, 0, 0, 0, 0, 0], task="hard")  # 1/6 solved: rare; one success remembered
    dm.pull(timeout=1)
    push_group(dm, "g2", [0, 0], task="hard")  # all failures: a stored success comes back
    batch = dm.pull(timeout=1)
    assert sorted(e.total_reward for e in batch.episodes) == [0.0, 1.0]
    assert any(e.metadata.get("source") == "replayed" for e in batch.episodes)


def test_push_is_idempotent_by_episode_id():
    dm = DataManager(batch_groups=1, group_size=2)
    e = ep("g", 1.0)
    dm.push(e, acquired=False)
    dm.push(e, acquired=False)
    assert dm.metrics().pushed == 1 and dm.pull(timeout=0.05) is None


# ---- backpressure, threads, meters -----------------------------------------------------------

def test_backpressure_limits_in_flight_plus_queued():
    dm = DataManager(batch_groups=1, group_size=2, max_in_flight=2, env_slots=2)
    assert dm.try_acquire() and dm.try_acquire() and not dm.try_acquire()
    dm.push(ep("g", 1.0))
    assert not dm.try_acquire()  # one in flight + one queued
    dm.push(ep("g", 0.0))
    assert dm.pull(timeout=1) is not None and dm.try_acquire()


async def test_async_collector_and_trainer_thread_meet_in_the_manager():
    dm = DataManager(batch_groups=2, group_size=2, max_in_flight=4, env_slots=4, staleness_bound=None)
    pulled: list[int] = []

    def trainer():
        try:
            for v in range(3):
                batch = dm.pull(version=v, timeout=60)
                assert batch is not None, "no batch within 60 s"
                pulled.append(len(batch.episodes))
        finally:  # a trainer that fails ends the producers' waits (they raise) instead of leaving them waiting
            if len(pulled) < 3:
                dm.close()

    thread = threading.Thread(target=trainer)
    thread.start()

    async def group(g: int):  # a group's two slots at once, as the collector asks for them
        await dm.acquire_async(2)
        for member in range(2):
            await asyncio.sleep(0.001)
            dm.push(ep(f"g{g}", float(member)))

    await asyncio.gather(*(group(g) for g in range(6)))
    await asyncio.to_thread(thread.join, 60)
    assert pulled == [4, 4, 4]
    m = dm.metrics()
    assert m.trained == 12 and m.in_flight == 0 and m.queue_depth == 0
    assert 0.0 <= m.trainer_idle_frac <= 1.0 and 0.0 < m.env_utilization <= 1.0


async def test_a_group_takes_its_slots_at_once_and_a_request_over_the_limit_or_after_close_is_refused():
    """Members of several groups taking one slot each can fill the limit with incomplete groups (the case a hung
    CI run showed); a group's slots taken at once cannot, and a request over the limit is refused clearly."""
    dm = DataManager(batch_groups=1, group_size=2, max_in_flight=2)
    await dm.acquire_async()
    dm.push(ep("a", 1.0))  # half of group a queued
    assert not dm.try_acquire(2)  # a whole group of b does not fit: b waits instead of half-filling the limit
    await dm.acquire_async()  # a's second member fits
    dm.push(ep("a", 0.0))
    assert dm.pull(timeout=1) is not None
    await asyncio.wait_for(dm.acquire_async(2), timeout=5)
    with pytest.raises(ValueError, match="max_in_flight=2"):
        await dm.acquire_async(3)
    dm.close()
    with pytest.raises(RuntimeError, match="closed"):
        await dm.acquire_async(1)


def test_close_wakes_a_waiting_trainer():
    dm = DataManager(batch_groups=1, group_size=2)
    threading.Timer(0.05, dm.close).start()
    result: list[object] = []
    waiter = threading.Thread(target=lambda: result.append(dm.pull()), daemon=True)
    waiter.start()
    waiter.join(30)
    assert not waiter.is_alive(), "pull() still blocks after close()"
    assert result == [None]


# ---- cursor --------------------------------------------------------------------------------------

def test_cursor_resume_neither_loses_nor_repeats():
    dm = DataManager(batch_groups=1, group_size=2, staleness_bound=None)
    store: list[Episode] = []
    a = push_group(dm, "a", [0, 1])
    b = push_group(dm, "b", [1, 1])  # will be dropped (zero variance)
    c = push_group(dm, "c", [1, 0])
    d_partial = ep("d", 1.0)
    store += a + b + c + [d_partial]
    assert dm.pull(timeout=1).group_ids == ["a"]
    saved = Cursor.from_dict(dm.cursor().to_dict())
    assert dm.pull(timeout=1).group_ids == ["c"]  # trained after the checkpoint: lost with the crash
    # crash; a fresh manager resumes from the checkpoint and the store
    fresh = DataManager(batch_groups=1, group_size=2, staleness_bound=None)
    retries = fresh.restore(saved, store)
    assert [r.group_id for r in retries] == ["d"]  # the half-finished group is completed by a retry
    fresh.push(ep("d", 0.0), acquired=False)
    again = fresh.pull(timeout=1)
    assert again.group_ids == ["c"]  # c trains again, because its update was lost
    assert fresh.pull(timeout=1).group_ids == ["d"]
    trained = saved.consumed + fresh.cursor().consumed[len(saved.consumed):]
    assert len(trained) == len(set(trained))  # no episode twice in the surviving lineage
    every = {e.id for e in store} - {e.id for e in b}
    assert every <= set(trained)  # and none lost
    assert {e.id for e in b} <= set(fresh.cursor().dropped)


def test_resume_retries_each_missing_rollout_once_when_in_flight_ones_were_stored_as_infra_failures():
    """Episodes stored as they end, plus the in-flight ones ended as infra failures on resume (`end_in_flight`):
    a group gets exactly one retry per rollout it lacks, and a group that had only in-flight rollouts is retried
    in full; nothing infra-failed is ever trained."""
    stopped = ep("g", 0.0, failure=Failure.INFRA)  # in flight at the kill, ended on resume
    finished = [ep("g", 1.0), ep("g", 0.0)]  # stored as they ended, their group unfinished at the kill
    only_in_flight = [ep("h", 0.0, failure=Failure.INFRA) for _ in range(2)]
    fresh = DataManager(batch_groups=1, group_size=4, staleness_bound=None)
    fresh.restore(Cursor(), finished + [stopped] + only_in_flight)
    owed = fresh.take_retries()
    assert sorted(r.group_id for r in owed) == ["g", "g"] + ["h"] * 4  # g: 1 failed + 1 never started
    for i, r in enumerate(owed):
        fresh.push(ep(r.group_id, float(i % 2)), acquired=False)
    trained = [fresh.pull(timeout=1), fresh.pull(timeout=1)]
    assert sorted(b.group_ids[0] for b in trained) == ["g", "h"]
    ids = [e.id for b in trained for e in b.episodes]
    assert len(ids) == len(set(ids)) == 8 and not {e.id for e in [stopped, *only_in_flight]} & set(ids)


def test_a_late_episode_of_a_finished_group_is_dropped_and_holds_no_room():
    """A retry that outlived its group (or an in-flight episode ended at a resume) must not start a new group:
    that group could never complete, its episodes would hold in-flight room forever and stall the producer."""
    dm = DataManager(batch_groups=1, group_size=2, staleness_bound=None, max_in_flight=4)
    push_group(dm, "a", [0, 1])
    assert dm.pull(timeout=1).group_ids == ["a"]
    late = ep("a", 1.0)
    assert dm.try_acquire(1)
    dm.push(late)
    dm.push(ep("a", 0.0, failure=Failure.INFRA), acquired=False)
    assert dm.take_retries() == [] and late.id in dm.cursor().dropped
    assert ("late" in dm.metrics().dropped) and dm.try_acquire(4)  # the whole limit is free again


def test_resume_issues_no_retry_for_groups_already_trained():
    """At a resume, an in-flight retry of an already trained group (ended as infra by `end_in_flight`) is late:
    no retries for it, no phantom group that would train its replacements twice."""
    dm = DataManager(batch_groups=1, group_size=2, staleness_bound=None)
    trained = push_group(dm, "a", [0, 1])
    assert dm.pull(timeout=1).group_ids == ["a"]
    saved = Cursor.from_dict(dm.cursor().to_dict())
    stopped_retry = ep("a", 0.0, failure=Failure.INFRA)
    fresh = DataManager(batch_groups=1, group_size=2, staleness_bound=None)
    assert fresh.restore(saved, trained + [stopped_retry]) == [] and fresh.take_retries() == []
    assert fresh.metrics().dropped == {"late": 1}


def test_stalled_names_a_limit_held_by_groups_that_cannot_complete():
    dm = DataManager(batch_groups=1, group_size=4, staleness_bound=None, max_in_flight=4)
    assert dm.stalled() is None
    push_group(dm, "x", [0, 1, 0])  # three of four, and nothing will ever bring the fourth
    assert "held by 3 queued episodes" in dm.stalled() and "'x': '3/4'" in dm.stalled()
    assert dm.try_acquire(1) and dm.stalled() is None  # something in flight may still complete it
    dm.release()
    dm.push(ep("x", 0.0, failure=Failure.INFRA), acquired=False)
    assert dm.stalled() is None  # a retry is owed


def test_a_group_takes_all_its_slots_at_once_so_producers_cannot_deadlock():
    """Two producers that each held part of a group could fill the limit and wait on each other forever."""
    dm = DataManager(batch_groups=2, group_size=4, max_in_flight=8)
    assert dm.try_acquire(4)  # producer A: one whole group
    assert dm.try_acquire(4)  # producer B: one whole group
    assert not dm.try_acquire(4) and not dm.try_acquire(1)
