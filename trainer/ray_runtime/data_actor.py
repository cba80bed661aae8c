"""The data manager as a Ray actor, and the proxy that collectors and the trainer hold.

`DataManagerActor` runs the very `agentgym.data.DataManager` of a local run
(it is thread-safe) in a threaded actor, so the trainer's blocking `pull`
waits inside the actor while rollout workers keep pushing. Its meters
(trainer idle, queue depth, staleness) are measured where the data lives.

`RemoteDataManager` offers the methods the rollout driver and the trainer
loop call on a `DataManager`, each a round trip to the actor. Calls from one
caller return before the next is sent, so a group's `expect_group` always
lands before its pushes. The only change in behaviour is polling: a refused
`try_acquire` is not asked again for `poll_s` (the backpressure loop would
otherwise send hundreds of round trips a second while the pipeline is full), and
`stalled` answers from a cache of `poll_s * 10` (the producer asks it on every
refused poll while it has nothing running).

Each rollout worker's proxy names its `owner` (the worker's incarnation), so the
actor knows the in-flight slots and the retries each worker holds. When a
rollout worker dies and Ray restarts it, `recover(owner, ...)` settles what the
dead incarnation left (`RolloutLoss`): its episodes still in flight in the store
end as infrastructure failures (`IN_FLIGHT_AT_WORKER_LOSS`), every episode it
stored is pushed (a push is idempotent by id), the rollouts its groups never
started and the retries it took but never started are owed again, and its slots
are given back. Its groups are taken to be of the run's `group_size`.

Only the actor sees every worker's retries: `stalled` (no collection can ever go on) is never
reported while a retry is out with some worker, which runs it or, when its process died, leaves it
to `recover`; a retry whose run failed stops the run as that worker's collection failure.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from agentgym.data import Cursor, DataManager, PipelineMetrics, RetryRequest, TrainBatch
from agentgym.trajectory import Episode, EpisodeStatus, Failure

#: the reason stored with the episodes a dead rollout worker left in flight (infra failures: retried, never trained)
IN_FLIGHT_AT_WORKER_LOSS = "in flight when its rollout worker died; ended when the worker was restarted"
#: the metadata key naming the rollout worker incarnation that ran an episode
OWNER_KEY = "rollout_worker"


class DataManagerActor:
    """Actor body: one `DataManager`, methods forwarded (see the module docstring)."""

    def __init__(self, kwargs: dict[str, Any]):
        self.dm = DataManager(**kwargs)
        self._lock = threading.Lock()
        self._held: Counter[str] = Counter()  #: in-flight slots each rollout worker incarnation holds
        self._retries_out: dict[str, list[RetryRequest]] = {}  #: retries handed to a worker, not yet pushed back
        self._owed: list[RetryRequest] = []  #: retries owed again after a rollout worker's loss
        self._pushed_ids: set[str] = set()  #: episodes pushed (a dead worker's others are pushed by `recover`)
        self._groups_seen: set[str] = set()  #: groups announced or pushed to

    def batch_groups(self) -> int:
        return self.dm.batch_groups

    def rollouts_for(self, task_id: str) -> int:
        return self.dm.rollouts_for(task_id)

    def expect_group(self, group_id: str, task_id: str, size: int) -> None:
        with self._lock:
            self.dm.expect_group(group_id, task_id, size)
            self._groups_seen.add(group_id)

    def try_acquire(self, n: int = 1, owner: str | None = None) -> bool:
        with self._lock:
            ok = self.dm.try_acquire(n)
            if ok and owner is not None:
                self._held[owner] += n
            return ok

    def release(self, owner: str | None = None) -> None:
        with self._lock:
            self.dm.release()
            if owner is not None:
                self._held[owner] -= 1

    def push(self, episode: Episode, acquired: bool, owner: str | None = None) -> None:
        with self._lock:
            self._push(episode, acquired)
            if owner is None:
                return
            if acquired:
                self._held[owner] -= 1
            taken = self._retries_out.get(owner, [])
            done = next((r for r in taken if r.group_id == episode.group_id), None)
            if done is not None:
                taken.remove(done)

    def _push(self, episode: Episode, acquired: bool) -> None:
        self.dm.push(episode, acquired=acquired)
        self._pushed_ids.add(episode.id)
        self._groups_seen.add(episode.group_id)

    def take_retries(self, owner: str | None = None) -> list[RetryRequest]:
        with self._lock:
            out, self._owed = self.dm.take_retries() + self._owed, []
            if owner is not None:
                self._retries_out.setdefault(owner, []).extend(out)
            return out

    def recover(self, owner: str, store_url: str, run_id: str) -> dict[str, int]:
        """Settle what the dead rollout worker incarnation `owner` left (see the module docstring); the counts."""
        from agentgym.store import TrajectoryStore

        with TrajectoryStore(store_url) as store:
            mine = [e for e in store.iter_episodes(run_id=run_id) if e.metadata.get(OWNER_KEY) == owner]
            ended = [e for e in mine if e.status == EpisodeStatus.PARTIAL and e.metadata.get("in_flight")]
            for episode in ended:
                episode.metadata.pop("in_flight")
                episode.end(EpisodeStatus.ERROR, IN_FLIGHT_AT_WORKER_LOSS, Failure.INFRA)
            store.put_many(ended)
        with self._lock:
            unpushed = [e for e in mine if e.id not in self._pushed_ids]
            # a group nobody pushed to is one of its own new groups; in a known group its episode ran a retry
            new_groups = Counter(e.group_id for e in mine if e.group_id not in self._groups_seen)
            retries_started = Counter(e.group_id for e in unpushed if e.group_id in self._groups_seen)
            owed = []
            for request in self._retries_out.pop(owner, []):
                if retries_started[request.group_id]:
                    retries_started[request.group_id] -= 1
                else:
                    owed.append(request)  # taken, never started
            for group_id, n in new_groups.items():  # the rollouts of its groups that never started
                first = next(e for e in mine if e.group_id == group_id)
                owed += [RetryRequest(group_id, first.task_id, first.seed, "")] * max(0, self.dm.group_size - n)
            for _ in range(self._held.pop(owner, 0)):
                self.dm.release()
            for episode in unpushed:
                self._push(episode, acquired=False)
            self._owed += owed
        return {"ended_in_flight": len(ended), "stored": len(mine), "owed": len(owed)}

    def take_dropped(self) -> list[tuple[str, int, str]]:
        return self.dm.take_dropped()

    def stalled(self) -> str | None:
        """`DataManager.stalled`, but never while a retry is owed or out with a worker: a retry takes no in-flight
        slot, so the data manager alone would see "nothing in flight" while a worker runs the retry that completes
        a group, or while that worker's process is being restarted (`recover` then owes the retry again)."""
        with self._lock:
            out = any(self._retries_out.values())
            return None if self._owed or out else self.dm.stalled()

    def set_version(self, version: int) -> None:
        self.dm.set_version(version)

    def pull(self, version: int | None, timeout: float | None, partial: bool) -> TrainBatch | None:
        return self.dm.pull(version=version, timeout=timeout, partial=partial)

    def close(self) -> None:
        self.dm.close()

    def cursor(self) -> Cursor:
        return self.dm.cursor()

    def metrics(self) -> PipelineMetrics:
        return self.dm.metrics()

    def restore(self, cursor: dict[str, Any], store_url: str, run_id: str) -> int:
        """Resume from a checkpoint's cursor and the run's stored episodes; returns the retries owed."""
        from agentgym.store import IN_FLIGHT_AT_RESUME, TrajectoryStore

        store = TrajectoryStore(store_url)
        store.end_in_flight(run_id, IN_FLIGHT_AT_RESUME)
        stored = list(store.iter_episodes(run_id=run_id))
        with self._lock:  # every stored episode is known from here on: none is a lost worker's to push again
            self._pushed_ids |= {e.id for e in stored}
            self._groups_seen |= {e.group_id for e in stored}
            return len(self.dm.restore(Cursor.from_dict(cursor), stored))


class RemoteDataManager:
    """A `DataManager` look-alike over a `DataManagerActor` handle (see the module docstring)."""

    def __init__(self, actor: Any, *, poll_s: float = 0.02, owner: str | None = None):
        import ray

        self._ray, self.actor, self.poll_s, self.owner = ray, actor, poll_s, owner
        self.batch_groups: int = ray.get(actor.batch_groups.remote())
        self._refused_at = float("-inf")
        self._stalled_at, self._stalled = float("-inf"), None

    def _call(self, method: str, *args: Any) -> Any:
        return self._ray.get(getattr(self.actor, method).remote(*args))

    # ---- collection side ---------------------------------------------------------------------
    def rollouts_for(self, task_id: str) -> int:
        return self._call("rollouts_for", task_id)

    def expect_group(self, group_id: str, task_id: str, size: int) -> None:
        self._call("expect_group", group_id, task_id, size)

    def try_acquire(self, n: int = 1) -> bool:
        if time.monotonic() - self._refused_at < self.poll_s:
            return False
        ok = self._call("try_acquire", n, self.owner)
        if not ok:
            self._refused_at = time.monotonic()
        return ok

    def release(self) -> None:
        self._call("release", self.owner)

    def push(self, episode: Episode, *, acquired: bool = True) -> None:
        self._call("push", episode, acquired, self.owner)

    def take_retries(self) -> list[RetryRequest]:
        return self._call("take_retries", self.owner)

    def take_dropped(self) -> list[tuple[str, int, str]]:
        return self._call("take_dropped")

    def stalled(self) -> str | None:
        if time.monotonic() - self._stalled_at >= self.poll_s * 10:
            self._stalled, self._stalled_at = self._call("stalled"), time.monotonic()
        return self._stalled

    # ---- training side -----------------------------------------------------------------------
    def set_version(self, version: int) -> None:
        self._call("set_version", version)

    def pull(self, version: int | None = None, timeout: float | None = None, *,
             partial: bool = False) -> TrainBatch | None:
        return self._call("pull", version, timeout, partial)

    def close(self) -> None:
        self._call("close")

    def cursor(self) -> Cursor:
        return self._call("cursor")

    def metrics(self) -> PipelineMetrics:
        return self._call("metrics")
