"""Rollout worker restarts in an async run: a restarted worker rejoins, what its dead incarnation left is settled.

Ray restarts a rollout worker whose process died (`RaySettings.actor_restarts`); the new
process runs the constructor again and reports a new `incarnation_id`. The trainer actor's
watchdog calls `RolloutSupervisor.check` every few seconds; on a new incarnation it

1. has the data manager actor settle the dead incarnation's share (`DataManagerActor.recover`):
   its episodes still in flight end as infrastructure failures stored with the reason
   (`IN_FLIGHT_AT_WORKER_LOSS`), its stored episodes are pushed, the rollouts it never
   started are owed as retries, its in-flight slots are given back;
2. loads the weights of the last update into the new incarnation (`RayWeightSync.rejoin`);
3. starts its producer.

A worker that stays unreachable for `RESTART_WAIT_S` (its restarts are spent) is a collection
failure: the run stops, as it did before restarts existed.
"""

from __future__ import annotations

import time
from typing import Any

from agentgym.trainer.ray_runtime.env_worker import RESTART_WAIT_S

#: how long one call to a worker may take before the watchdog treats it as unreachable this round (seconds)
CALL_TIMEOUT_S = 30.0


class RolloutSupervisor:
    """Watches the rollout workers of one async run (see the module docstring)."""

    def __init__(self, workers: list[Any], data_manager: Any, sync: Any, store_url: str, run_id: str,
                 say: Any = print):
        self.workers, self.dm, self.sync = workers, data_manager, sync
        self.store_url, self.run_id, self.say = store_url, run_id, say
        self.tags: list[str] = []
        self.unreachable_since: dict[int, float] = {}
        self.restarts: list[dict[str, Any]] = []  #: one record per rejoined worker

    def begin(self) -> None:
        """Note who each worker is now (before their producers start)."""
        import ray

        self.tags = ray.get([w.incarnation_id.remote() for w in self.workers])

    def check(self) -> list[str]:
        """One look at every worker: rejoin the restarted ones; returns the collection failures seen."""
        import ray

        failures: list[str] = []
        for i, worker in enumerate(self.workers):
            try:
                tag = ray.get(worker.incarnation_id.remote(), timeout=CALL_TIMEOUT_S)
                if tag != self.tags[i]:
                    self._rejoin(i, worker, tag)
                failures += ray.get(worker.failures.remote(), timeout=CALL_TIMEOUT_S)
            except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError) as exc:
                since = self.unreachable_since.setdefault(i, time.monotonic())
                if time.monotonic() - since > RESTART_WAIT_S:
                    failures.append(f"rollout worker {i} died and was not restarted within {RESTART_WAIT_S:g} s "
                                    f"({type(exc).__name__}: {str(exc)[:200]})")
                continue
            self.unreachable_since.pop(i, None)
        return failures

    def _rejoin(self, index: int, worker: Any, tag: str) -> None:
        import ray

        old = self.tags[index]
        settled = ray.get(self.dm.recover.remote(old, self.store_url, self.run_id))
        version = self.sync.rejoin(worker)
        ray.get(worker.start.remote())
        self.tags[index] = tag
        self.restarts.append({"worker": index, "old": old, "new": tag, "version": version, **settled})
        self.say(f"rollout worker {index} restarted ({old} -> {tag}): {settled['ended_in_flight']} episode(s) in "
                 f"flight ended as infra failures, {settled['owed']} rollout(s) owed again; weights v{version}")
