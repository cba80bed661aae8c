"""The collection side of a training run: the real collector feeding the data manager.

- `collect_batch` (sync mode): roll out whole groups, push them, until the data
  manager can hand out a full batch (zero-variance groups dropped by curation
  are refilled by further groups: dynamic sampling).
- `produce` (async mode): keep groups in flight as long as the data manager's
  backpressure allows, pushing each group as soon as it finishes, while the
  trainer pulls batches on another thread.

Retries owed for infrastructure failures are run first, into the group they complete.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agentgym.collector.config import Task
from agentgym.cost import EpisodeCost
from agentgym.data import DataManager, TrainBatch
from agentgym.trajectory import Episode

#: how long the producer tolerates a stall that `DataManager.stalled` reports before it fails the run (seconds)
STALL_GRACE_S = 10.0


class CollectionStalled(RuntimeError):
    """Async collection can never go on (the in-flight limit is held by groups that cannot complete)."""


@dataclass
class CollectTally:
    """Outcomes of the episodes collected since the last `take` (unbiased by curation)."""

    episodes: int = 0
    successes: int = 0
    reward_sum: float = 0.0
    turns: int = 0
    action_tokens: int = 0
    generate_s: float = 0.0
    costs: list[EpisodeCost] = field(default_factory=list)  #: of the episodes that recorded one
    # TRACE's allocation: branch points planned (with the sum of their scores: predicted mixed-outcome
    # probabilities once calibrated), how many of them ended mixed, and rollouts spent on extra roots
    branch_points: int = 0
    branch_score: float = 0.0
    branch_mixed: int = 0
    extra_roots: int = 0
    started: float = field(default_factory=time.perf_counter)

    def add(self, episodes: list[Episode], success_reward: float) -> None:
        for e in episodes:
            if e.metadata.get("source") == "replayed":
                continue
            self.episodes += 1
            self.successes += int(e.total_reward >= success_reward)
            self.reward_sum += e.total_reward
            self.turns += e.num_turns
            self.action_tokens += e.num_action_tokens
            if isinstance(e.metadata.get("cost"), dict):
                self.costs.append(EpisodeCost.from_dict(e.metadata["cost"]))


class RolloutDriver:
    """Feeds `dm` from `collector` with tasks drawn from `tasks` (see the module docstring)."""

    def __init__(self, collector: Any, dm: DataManager, tasks: list[str], *, seed: int, success_reward: float,
                 allocator: Any = None, trace_roots: int = 4):
        self.collector, self.dm, self.tasks = collector, dm, tasks
        self.success_reward = success_reward
        self.allocator, self.trace_roots = allocator, trace_roots  #: TRACE: tree groups instead of flat ones
        self._rng = random.Random(seed)
        self._tasks = self._task_stream()
        self.tally = CollectTally()
        self._tally_lock = threading.Lock()  # the trainer thread takes the tally while the event loop adds
        self.groups_started = 0
        self.failures: list[BaseException] = []

    def _task_stream(self) -> Iterator[Task]:
        while True:
            order = list(self.tasks)
            self._rng.shuffle(order)
            for task_id in order:
                yield Task(task_id, seed=self._rng.randrange(2**31))

    def take_tally(self) -> CollectTally:
        with self._tally_lock:
            tally, self.tally = self.tally, CollectTally()
        return tally

    # ---- one group ---------------------------------------------------------------------------
    async def run_group(self, task: Task, size: int, *, group_id: str | None = None, acquired: bool = False) -> None:
        """Roll out `size` episodes of `task` and push them (into `group_id` when completing a retry)."""
        self._push(await self._roll(task, size, group_id=group_id, acquired=acquired), size, group_id=group_id,
                   acquired=acquired)

    async def _roll(self, task: Task, size: int, *, group_id: str | None = None,
                    acquired: bool = False) -> list[Episode]:
        """The episodes of one group (fewer than `size` when some paused or were lost)."""
        self.groups_started += 1
        try:
            if self.allocator is not None and group_id is None:
                return await self._tree_group(task, size)
            return (await self.collector.collect([task], group_size=size, group_id=group_id)).episodes
        except BaseException:
            if acquired:
                for _ in range(size):
                    self.dm.release()
            raise

    def _push(self, episodes: list[Episode], size: int, *, group_id: str | None, acquired: bool) -> None:
        if group_id is None and episodes:
            self.dm.expect_group(episodes[0].group_id, episodes[0].task_id, size)
        with self._tally_lock:
            self.tally.add(episodes, self.success_reward)
        for e in episodes:
            self.dm.push(e, acquired=acquired)
        for _ in range(size - len(episodes)):  # paused or lost episodes: give their slots back
            if acquired:
                self.dm.release()

    async def _roll_in_order(self, jobs: list[tuple[Task, int, str | None]]) -> None:
        """Sync mode: roll out groups at once and push them in the order they were started, not the order they
        ended in, so one seed gives the data manager, and so the trainer, the same batches in every run."""
        rolled = await asyncio.gather(*(self._roll(task, size, group_id=gid) for task, size, gid in jobs))
        for (_, size, gid), episodes in zip(jobs, rolled, strict=True):
            self._push(episodes, size, group_id=gid, acquired=False)

    async def _tree_group(self, task: Task, budget: int) -> list[Episode]:
        """TRACE: `trace_roots` root rollouts, then the allocator spends the rest of `budget` on branches
        (turn-level forks of the most informative prefixes, or extra roots); one group, one budget."""
        roots = (await self.collector.collect([task], group_size=min(self.trace_roots, budget))).episodes
        tree = list(roots)
        plan = self.allocator.plan(tree, budget - len(tree))
        for request in plan:
            parent = next(e for e in tree if e.id == request.episode_id)
            if request.turn == 0:
                tree += (await self.collector.collect([task], group_size=request.k, group_id=parent.group_id)).episodes
            else:
                tree += await self.collector.branch(parent, request.turn, request.k)
        seen = self.allocator.observe(tree)
        with self._tally_lock:
            branches = [r for r in plan if r.turn > 0]
            self.tally.branch_points += len(branches)
            self.tally.branch_score += sum(r.score for r in branches)
            self.tally.branch_mixed += seen.branch_mixed
            self.tally.extra_roots += sum(r.k for r in plan if r.turn == 0)
        return tree

    async def run_retries(self) -> None:
        await self._roll_in_order([(Task(r.task_id, r.seed), 1, r.group_id) for r in self.dm.take_retries()])

    # ---- sync mode ---------------------------------------------------------------------------
    async def collect_batch(self, version: int, max_rounds: int = 4) -> TrainBatch | None:
        """Collect until the data manager hands out a full batch; after `max_rounds` rounds take what
        curation kept (None when it kept nothing: no group had any signal)."""
        keep_rate = 1.0
        for _ in range(max_rounds):
            await self.run_retries()
            batch = self.dm.pull(version=version, timeout=0)
            if batch is not None:
                return batch
            missing = self.dm.batch_groups - self.dm.metrics().ready_groups
            want = max(1, int(missing / max(keep_rate, 0.25) + 0.999))
            before = self.dm.metrics()
            tasks = [next(self._tasks) for _ in range(want)]
            await self._roll_in_order([(t, self.dm.rollouts_for(t.task_id), None) for t in tasks])
            after = self.dm.metrics()
            dropped = sum(after.dropped.values()) - sum(before.dropped.values())
            pushed = max(1, after.pushed - before.pushed)
            keep_rate = max(0.25, 1.0 - dropped / pushed) if dropped else 1.0
        return self.dm.pull(version=version, timeout=0, partial=True)

    # ---- async mode --------------------------------------------------------------------------
    async def produce(self, stop: asyncio.Event) -> None:
        """Launch groups whenever the data manager has room, until `stop` is set."""
        running: set[asyncio.Task] = set()
        try:
            while not stop.is_set():
                self._launch_retries(running)
                task = next(self._tasks)
                size = self.dm.rollouts_for(task.task_id)
                stalled_since = None
                while not self.dm.try_acquire(size):
                    if stop.is_set():
                        return
                    # a group waiting for its retry holds room: launch the retry while waiting, or no room comes
                    self._launch_retries(running)
                    stalled_since = self._check_stall(running, stalled_since)
                    await asyncio.sleep(0.002)
                self._track(running, self.run_group(task, size, acquired=True))
        finally:
            for job in running:
                job.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    def _check_stall(self, running: set[asyncio.Task], since: float | None) -> float | None:
        """Raise when no room can ever come (`DataManager.stalled`) for `STALL_GRACE_S` with nothing running: a
        clear error instead of a run that waits forever. Returns when the stall was first seen (None: no stall)."""
        reason = None if running else self.dm.stalled()
        if reason is None:
            return None
        now = time.monotonic()
        if since is not None and now - since > STALL_GRACE_S:
            raise CollectionStalled(f"collection cannot go on: {reason}; this is a bug in agentgym's group "
                                    "accounting: please report it with the run's episodes store")
        return since if since is not None else now

    def _launch_retries(self, running: set[asyncio.Task]) -> None:
        """Start the retries owed (each a one-episode group completing its group) without waiting for them."""
        for r in self.dm.take_retries():
            self._track(running, self.run_group(Task(r.task_id, r.seed), 1, group_id=r.group_id))

    def _track(self, running: set[asyncio.Task], coro: Any) -> None:
        job = asyncio.create_task(coro)
        running.add(job)
        job.add_done_callback(self._done(running))

    def _done(self, running: set[asyncio.Task]):
        def callback(job: asyncio.Task) -> None:
            running.discard(job)
            if not job.cancelled() and job.exception() is not None:
                self.failures.append(job.exception())
        return callback
