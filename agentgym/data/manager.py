"""The data manager: the only meeting point of collection and training (DART, RollArt).

Collectors `push` scored episodes as they finish; the trainer `pull`s batches
of a fixed number of complete groups. In between the manager keeps each
episode with its policy version, enforces the staleness bound, applies the
curation rules and keeps the meters. It is thread-safe: in one process the
collector's event loop pushes while the trainer thread pulls; on Ray the same
class runs as a threaded actor.

    dm = DataManager(batch_groups=16, group_size=8, staleness_bound=1)
    await dm.acquire_async(8)       # collector: wait for a group's 8 slots at once (backpressure)
    dm.push(episode)                # collector: a finished, scored episode
    batch = dm.pull(version=3)      # trainer: blocks until 16 curated groups are ready
    state = dm.cursor()             # checkpoint: resume neither loses nor repeats data

Infrastructure failures never reach the loss as zero reward: with
``infra="retry"`` the group waits for a retry (`take_retries`), with
``infra="mask"`` the failed episode is left out and the group trains without it.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

from agentgym.data.curation import Curation, dynamic_rollouts, mix_in_success, zero_variance
from agentgym.data.meters import OccupancyMeter, PipelineMetrics, WaitMeter, histogram
from agentgym.trajectory import Episode, EpisodeStatus, Failure

StaleAction = Literal["drop", "downweight"]
InfraAction = Literal["retry", "mask"]


@dataclass
class TrainBatch:
    """What the trainer gets: complete, curated groups with a weight and staleness per episode."""

    episodes: list[Episode]
    weights: list[float]  #: per episode (1, or the staleness down-weight)
    staleness: list[int]  #: trainer version minus the oldest token version of each episode
    version: int  #: the trainer's policy version when the batch was formed
    index: int  #: 0-based number of this batch in the run

    @property
    def group_ids(self) -> list[str]:
        return list(dict.fromkeys(e.group_id for e in self.episodes))


@dataclass(frozen=True)
class RetryRequest:
    """Run one more episode of `task_id` (same `seed`) into `group_id`: an infra failure is replaced."""

    group_id: str
    task_id: str
    seed: int | None
    failed_episode_id: str


@dataclass
class Cursor:
    """Checkpointable position of the data stream (episode ids, not offsets, so async order is harmless)."""

    consumed: list[str] = field(default_factory=list)  #: ids handed to the trainer (trained)
    dropped: list[str] = field(default_factory=list)  #: ids dropped by curation or the staleness bound
    batches: int = 0  #: batches handed out so far

    def to_dict(self) -> dict[str, object]:
        return {"consumed": list(self.consumed), "dropped": list(self.dropped), "batches": self.batches}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Cursor:
        return cls(list(data["consumed"]), list(data["dropped"]), int(data["batches"]))  # type: ignore[arg-type]


@dataclass
class _Group:
    expected: int
    task_id: str = ""
    episodes: list[Episode] = field(default_factory=list)
    masked: list[Episode] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return len(self.episodes) + len(self.masked) >= self.expected


def episode_version(episode: Episode) -> int:
    """The oldest policy version among the episode's action tokens (its start version if none recorded)."""
    versions = [v for t in episode.turns for v in t.token_versions if v >= 0]
    if versions:
        return min(versions)
    return episode.policy_version if episode.policy_version is not None else 0


class DataManager:
    """See the module docstring. Arguments are explicit; the run config maps onto them."""

    def __init__(self, *, batch_groups: int, group_size: int, staleness_bound: int | None = 1,
                 stale: StaleAction = "drop", stale_decay: float = 0.5, infra: InfraAction = "retry",
                 curation: Curation = Curation(), success_reward: float = 1.0, max_in_flight: int | None = None,
                 env_slots: int | None = None, success_source: Callable[[str], Episode | None] | None = None,
                 on_push: Callable[[Episode], None] | None = None, stats_window: int = 32):
        if batch_groups < 1 or group_size < 1:
            raise ValueError(f"batch_groups and group_size must be >= 1, got {batch_groups} and {group_size}")
        if staleness_bound is not None and staleness_bound < 0:
            raise ValueError(f"staleness_bound must be >= 0 (0 = on-policy only) or None, got {staleness_bound}")
        if stale not in ("drop", "downweight") or infra not in ("retry", "mask"):
            raise ValueError(f"stale must be drop|downweight and infra retry|mask, got {stale!r}, {infra!r}")
        self.batch_groups, self.group_size = batch_groups, group_size
        self.staleness_bound, self.stale, self.stale_decay, self.infra = staleness_bound, stale, stale_decay, infra
        self.curation, self.success_reward = curation, success_reward
        self.max_in_flight = max_in_flight
        self._success_source, self._on_push, self._window = success_source, on_push, stats_window
        self._cv = threading.Condition()
        self._groups: dict[str, _Group] = {}
        self._ready: deque[str] = deque()
        self._staged: list[tuple[list[Episode], list[float], list[int]]] = []
        self._retries: list[RetryRequest] = []
        self._outcomes: dict[str, deque[bool]] = {}
        self._last_success: dict[str, Episode] = {}
        self._cursor = Cursor()
        self._known: set[str] = set()
        #: groups handed to the trainer or dropped by curation: a late episode of one (a retry that outlived its
        #: group, an in-flight episode ended at a resume) is dropped as "late", never started as a new group
        self._finished: set[str] = set()
        self._staleness: Counter[int] = Counter()
        self._dropped: Counter[str] = Counter()
        self._drop_log: list[tuple[str, int, str]] = []  #: (episode id, turns, reason) since `take_dropped`
        self._pushed = self._infra_failures = 0
        self._version = 0
        self._occupancy = OccupancyMeter(env_slots or max_in_flight or batch_groups * group_size)
        self._trainer_wait = WaitMeter()
        self._closed = False

    # ---- collection side ---------------------------------------------------------------------
    def rollouts_for(self, task_id: str) -> int:
        """How many rollouts a new group of `task_id` should get (fixed, or DART's dynamic rule)."""
        if not self.curation.adaptive_rollouts:
            return self.group_size
        c = self.curation
        return dynamic_rollouts(self.success_rate(task_id), n_min=c.rollouts_min, n_max=c.rollouts_max,
                                threshold=c.adaptive_threshold)

    def expect_group(self, group_id: str, task_id: str, size: int) -> None:
        """Announce a group of `size` rollouts (otherwise a group is complete at `group_size`)."""
        with self._cv:
            group = self._groups.setdefault(group_id, _Group(size, task_id))
            group.expected, group.task_id = size, task_id

    def try_acquire(self, n: int = 1) -> bool:
        """Take `n` in-flight slots at once if the backpressure limit allows; each `push` gives one back.

        A group asks for all its slots in one call: producers that each held part of a
        group could otherwise fill the limit between them and wait on each other forever.
        """
        with self._cv:
            if self.max_in_flight is not None and self._occupancy.level + self._queued() + n > self.max_in_flight:
                return False
            self._occupancy.change(+n)
            return True

    async def acquire_async(self, n: int = 1, *, poll_s: float = 0.002) -> None:
        """Wait (without blocking the event loop) for `n` in-flight slots, taken at once (`try_acquire`).

        A group's producer asks for the whole group: `n = 1` per member lets the members of several
        groups fill the limit between them, each group incomplete, and wait on each other forever.
        """
        if self.max_in_flight is not None and n > self.max_in_flight:
            raise ValueError(f"acquire_async({n}): more slots than max_in_flight={self.max_in_flight} allows at once; "
                             "raise max_in_flight to at least the group size")
        while not self.try_acquire(n):
            if self._closed:
                raise RuntimeError("the data manager was closed")
            await asyncio.sleep(poll_s)

    def release(self) -> None:
        """Give back a slot without pushing (an episode that was abandoned)."""
        with self._cv:
            self._occupancy.change(-1)

    def push(self, episode: Episode, *, acquired: bool = True) -> None:
        """Hand over one finished, scored episode (idempotent by id)."""
        if self._on_push is not None:
            self._on_push(episode)
        with self._cv:
            if acquired:
                self._occupancy.change(-1)
            if episode.id in self._known:
                return
            self._known.add(episode.id)
            self._pushed += 1
            self._add(episode)
            self._cv.notify_all()

    def _add(self, episode: Episode) -> None:
        if (episode.group_id or episode.id) in self._finished:
            self._drop([episode], "late")
            return
        group = self._groups.setdefault(episode.group_id or episode.id, _Group(self.group_size, episode.task_id))
        if episode.failure == Failure.INFRA:
            self._infra_failures += 1
            if self.infra == "retry":
                self._retries.append(RetryRequest(episode.group_id, episode.task_id, episode.seed, episode.id))
            else:
                group.masked.append(episode)
            self._cursor.dropped.append(episode.id)
            self._dropped["infra"] += 1
            self._drop_log.append((episode.id, episode.num_turns, "infra"))
        else:
            group.episodes.append(episode)
            self._record_outcome(episode)
        if group.complete and (episode.group_id or episode.id) not in self._ready:
            self._ready.append(episode.group_id or episode.id)

    def take_retries(self) -> list[RetryRequest]:
        """Retries the collector owes (infra failures with ``infra="retry"``); each is handed out once."""
        with self._cv:
            out, self._retries = self._retries, []
            return out

    def stalled(self) -> str | None:
        """Why no collection can ever go on, or None: the in-flight limit is held by queued episodes of groups
        that cannot complete, with nothing in flight, nothing ready or staged for the trainer and no retry owed.

        Only the producer can tell that nothing is running on its side; it asks this when it has nothing running.
        """
        with self._cv:
            if self.max_in_flight is None or self._occupancy.level or self._ready or self._staged or self._retries:
                return None
            queued = self._queued()
            if queued + self.group_size <= self.max_in_flight:
                return None
            waiting = {gid: f"{len(g.episodes) + len(g.masked)}/{g.expected}" for gid, g in self._groups.items()}
            return (f"the in-flight limit ({self.max_in_flight}) is held by {queued} queued episodes of "
                    f"{len(waiting)} groups that cannot complete ({dict(list(waiting.items())[:4])}), with nothing "
                    "in flight and no retry owed")

    def _queued(self) -> int:
        return sum(len(g.episodes) for g in self._groups.values()) + sum(len(s[0]) for s in self._staged)

    # ---- task statistics ---------------------------------------------------------------------
    def is_success(self, episode: Episode) -> bool:
        return episode.status != EpisodeStatus.ERROR and episode.total_reward >= self.success_reward

    def _record_outcome(self, episode: Episode) -> None:
        if episode.metadata.get("source") == "replayed":
            return
        won = self.is_success(episode)
        self._outcomes.setdefault(episode.task_id, deque(maxlen=self._window)).append(won)
        if won:
            self._last_success[episode.task_id] = episode

    def success_rate(self, task_id: str) -> float | None:
        """Observed success rate of `task_id` over its recent episodes (None if never seen)."""
        outcomes = self._outcomes.get(task_id)
        return sum(outcomes) / len(outcomes) if outcomes else None

    # ---- training side -----------------------------------------------------------------------
    def set_version(self, version: int) -> None:
        """The trainer's current policy version (staleness is measured against it)."""
        with self._cv:
            self._version = version
            self._cv.notify_all()

    def pull(self, version: int | None = None, timeout: float | None = None, *,
             partial: bool = False) -> TrainBatch | None:
        """Block until `batch_groups` curated groups are ready; None on timeout or close.

        With `partial`, hand out whatever curated groups are ready when the wait ends (None if none).
        """
        began = self._trainer_wait.begin()
        with self._cv:
            if version is not None:
                self._version = version
            ok = self._cv.wait_for(lambda: self._fill() or self._closed, timeout=timeout)
            if not (ok or partial) or not self._staged or (not partial and len(self._staged) < self.batch_groups):
                return None
            staged, self._staged = self._staged[:self.batch_groups], self._staged[self.batch_groups:]
            batch = TrainBatch([e for s in staged for e in s[0]], [w for s in staged for w in s[1]],
                               [k for s in staged for k in s[2]], self._version, self._cursor.batches)
            self._cursor.batches += 1
            self._cursor.consumed.extend(e.id for e in batch.episodes)
            self._staleness.update(batch.staleness)
        self._trainer_wait.end(began)
        return batch

    def _fill(self) -> bool:
        """Curate ready groups into the staging list; True once a full batch is staged."""
        while len(self._staged) < self.batch_groups and self._ready:
            gid = self._ready.popleft()
            group = self._groups.pop(gid)
            self._finished.add(gid)
            curated = self._curate(group)
            if curated is not None:
                self._staged.append(curated)
        return len(self._staged) >= self.batch_groups

    def _curate(self, group: _Group) -> tuple[list[Episode], list[float], list[int]] | None:
        episodes = group.episodes
        stale = [self._version - episode_version(e) for e in episodes]
        bound = self.staleness_bound
        if bound is not None and self.stale == "drop" and max(stale, default=0) > bound:
            return self._drop(episodes, "stale")
        if self.curation.mix_successes and self._rarely_solved(group.task_id):
            source = self._last_success.get(group.task_id) or (
                self._success_source(group.task_id) if self._success_source else None)
            mixed = mix_in_success(episodes, source, is_success=self.is_success)
            if mixed is None:
                return self._drop(episodes, "no_success")
            episodes = mixed
            stale = [0 if e.metadata.get("source") == "replayed" else s for e, s in zip(episodes, stale, strict=True)]
        if not episodes:
            return None
        if self.curation.drop_zero_variance and zero_variance([e.total_reward for e in episodes]):
            return self._drop(episodes, "zero_variance")
        weights = [1.0 if bound is None or s <= bound else self.stale_decay ** (s - bound) for s in stale]
        return episodes, weights, stale

    def _rarely_solved(self, task_id: str) -> bool:
        rate = self.success_rate(task_id)
        return rate is not None and rate < self.curation.rare_success_rate

    def _drop(self, episodes: list[Episode], reason: str) -> None:
        self._dropped[reason] += len(episodes)
        self._drop_log.extend((e.id, e.num_turns, reason) for e in episodes if e.metadata.get("source") != "replayed")
        self._cursor.dropped.extend(e.id for e in episodes if e.metadata.get("source") != "replayed")
        return None

    def take_dropped(self) -> list[tuple[str, int, str]]:
        """(episode id, turn count, reason) of every episode dropped since the last call (each handed out once)."""
        with self._cv:
            out, self._drop_log = self._drop_log, []
            return out

    def close(self) -> None:
        """Wake every waiter; `pull` returns None and `acquire_async` raises from now on."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    # ---- durability and meters ---------------------------------------------------------------
    def cursor(self) -> Cursor:
        with self._cv:
            return Cursor(list(self._cursor.consumed), list(self._cursor.dropped), self._cursor.batches)

    def restore(self, cursor: Cursor, stored: Iterable[Episode]) -> list[RetryRequest]:
        """Resume: take the cursor back and re-queue every stored episode it did not consume or drop.

        Groups left incomplete by the crash get retry requests for their missing rollouts.
        """
        done = set(cursor.consumed) | set(cursor.dropped)
        stored = list(stored)
        with self._cv:
            self._cursor = Cursor(list(cursor.consumed), list(cursor.dropped), cursor.batches)
            self._known |= done
            self._finished |= {e.group_id or e.id for e in stored if e.id in cursor.consumed or (
                e.id in done and e.failure != Failure.INFRA)}  # trained, or dropped by curation (infra: retried)
            for episode in stored:
                if episode.id in done or episode.id in self._known:
                    continue
                self._known.add(episode.id)
                self._add(episode)
            owed = Counter(r.group_id for r in self._retries)  # infra failures among `stored` are retried already
            missing = []
            for gid, group in self._groups.items():
                if not group.complete and (group.episodes or owed[gid]):
                    ref = group.episodes[0] if group.episodes else next(r for r in self._retries if r.group_id == gid)
                    missing += [RetryRequest(gid, group.task_id or ref.task_id, ref.seed, "")] * max(0, (
                        group.expected - len(group.episodes) - len(group.masked) - owed[gid]))
            self._retries.extend(missing)
            self._cv.notify_all()
            return missing

    def metrics(self) -> PipelineMetrics:
        with self._cv:
            idle, util = self._occupancy.fractions()
            return PipelineMetrics(
                queue_depth=self._queued(), ready_groups=len(self._ready) + len(self._staged),
                in_flight=self._occupancy.level, staleness_histogram=histogram(self._staleness),
                max_staleness=max(self._staleness, default=0), trainer_idle_frac=self._trainer_wait.fraction(),
                rollout_idle_frac=idle, env_utilization=util, pushed=self._pushed,
                trained=len(self._cursor.consumed), dropped=dict(self._dropped),
                infra_failures=self._infra_failures, trainer_wait_s=self._trainer_wait.waited)
