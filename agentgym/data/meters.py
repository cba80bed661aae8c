"""Pipeline meters of the data manager: who waited for whom, and how stale the data was."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class PipelineMetrics:
    """A snapshot of the data manager's meters (all fractions in [0, 1])."""

    queue_depth: int  #: finished episodes waiting to be trained (ready and incomplete groups)
    ready_groups: int  #: complete groups waiting for the trainer
    in_flight: int  #: episodes started by collectors and not yet pushed
    staleness_histogram: dict[int, int]  #: trained episodes by staleness (versions behind the trainer)
    max_staleness: int  #: the largest staleness trained so far
    trainer_idle_frac: float  #: share of the trainer's time spent waiting for a batch (after the first batch)
    rollout_idle_frac: float  #: share of the time with no episode in flight
    env_utilization: float  #: time-averaged in-flight episodes / env slots
    pushed: int  #: episodes received
    trained: int  #: episodes handed to the trainer
    dropped: dict[str, int] = field(default_factory=dict)  #: dropped episodes by reason
    infra_failures: int = 0  #: episodes that ended in an infrastructure failure

    def flat(self, prefix: str = "data/") -> dict[str, float]:
        """Scalars for metrics.jsonl / TensorBoard."""
        out = {f"{prefix}{k}": float(getattr(self, k)) for k in (
            "queue_depth", "ready_groups", "in_flight", "max_staleness", "trainer_idle_frac", "rollout_idle_frac",
            "env_utilization", "pushed", "trained", "infra_failures")}
        out.update({f"{prefix}dropped_{k}": float(v) for k, v in self.dropped.items()})
        out.update({f"{prefix}staleness_hist_{k}": float(v) for k, v in self.staleness_histogram.items()})
        return out


class OccupancyMeter:
    """Time integral of a level (episodes in flight) and of the time it sat at zero."""

    def __init__(self, slots: int, clock=time.monotonic) -> None:
        self.slots = max(1, slots)
        self._clock = clock
        self._start = clock()
        self._last = self._start
        self._level = 0
        self._area = 0.0
        self._idle = 0.0

    def _advance(self) -> None:
        now = self._clock()
        dt = now - self._last
        self._area += dt * self._level
        if self._level == 0:
            self._idle += dt
        self._last = now

    def change(self, delta: int) -> None:
        self._advance()
        self._level = max(0, self._level + delta)

    @property
    def level(self) -> int:
        return self._level

    def fractions(self) -> tuple[float, float]:
        """(idle fraction, utilization) since the meter started."""
        self._advance()
        span = max(self._last - self._start, 1e-9)
        return self._idle / span, min(1.0, self._area / (span * self.slots))


class WaitMeter:
    """How much of a consumer's time went into waiting (trainer idle).

    The clock starts when the first wait ends: filling the pipeline before the very
    first batch is start-up, not idleness, and is reported separately (`warmup_s`).
    """

    def __init__(self, clock=time.monotonic) -> None:
        self._clock = clock
        self._start: float | None = None
        self.waited = 0.0
        self.warmup_s = 0.0

    def begin(self) -> float:
        return self._clock()

    def end(self, began: float) -> None:
        now = self._clock()
        if self._start is None:
            self._start = now
            self.warmup_s = now - began
        else:
            self.waited += now - began

    def fraction(self) -> float:
        if self._start is None:
            return 0.0
        return min(1.0, self.waited / max(self._clock() - self._start, 1e-9))


def histogram(values: Counter[int]) -> dict[int, int]:
    return {k: values[k] for k in sorted(values)}
