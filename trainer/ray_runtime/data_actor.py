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
"""

from __future__ import annotations

import time
from typing import Any

from agentgym.data import Cursor, DataManager, PipelineMetrics, RetryRequest, TrainBatch
from agentgym.trajectory import Episode


class DataManagerActor:
    """Actor body: one `DataManager`, methods forwarded (see the module docstring)."""

    def __init__(self, kwargs: dict[str, Any]):
        self.dm = DataManager(**kwargs)

    def batch_groups(self) -> int:
        return self.dm.batch_groups

    def rollouts_for(self, task_id: str) -> int:
        return self.dm.rollouts_for(task_id)

    def expect_group(self, group_id: str, task_id: str, size: int) -> None:
        self.dm.expect_group(group_id, task_id, size)

    def try_acquire(self, n: int = 1) -> bool:
        return self.dm.try_acquire(n)

    def release(self) -> None:
        self.dm.release()

    def push(self, episode: Episode, acquired: bool) -> None:
        self.dm.push(episode, acquired=acquired)

    def take_retries(self) -> list[RetryRequest]:
        return self.dm.take_retries()

    def take_dropped(self) -> list[tuple[str, int, str]]:
        return self.dm.take_dropped()

    def stalled(self) -> str | None:
        return self.dm.stalled()

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
        return len(self.dm.restore(Cursor.from_dict(cursor), store.iter_episodes(run_id=run_id)))


class RemoteDataManager:
    """A `DataManager` look-alike over a `DataManagerActor` handle (see the module docstring)."""

    def __init__(self, actor: Any, *, poll_s: float = 0.02):
        import ray

        self._ray, self.actor, self.poll_s = ray, actor, poll_s
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
        ok = self._call("try_acquire", n)
        if not ok:
            self._refused_at = time.monotonic()
        return ok

    def release(self) -> None:
        self._call("release")

    def push(self, episode: Episode, *, acquired: bool = True) -> None:
        self._call("push", episode, acquired)

    def take_retries(self) -> list[RetryRequest]:
        return self._call("take_retries")

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
