"""Pipeline meters of the data manager: who waited for whom, and how stale the data was."""

from __future__ import annotations

import time
from collections import Counter, deque
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
    trainer_wait_s: float = 0.0  #: seconds the trainer has waited for a batch (after the first), in all

    def flat(self, prefix: str = "data/") -> dict[str, float]:
        """Scalars for metrics.jsonl / TensorBoard."""
        out = {f"{prefix}{k}": float(getattr(self, k)) for k in (
            "queue_depth", "ready_groups", "in_flight", "max_staleness", "trainer_idle_frac", "rollout_idle_frac",
            "env_utilization", "pushed", "trained", "infra_failures", "trainer_wait_s")}
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


#: the stages a run's throughput can be limited by (`bottleneck`); "collection" when no episode ended to say where
STAGES = ("trainer", "policy", "env", "queue", "collection")


def bottleneck(trainer_wait_frac: float, stage_s: dict[str, float]) -> str:
    """The stage that limits throughput over a window: the trainer while it waits for data less than half the
    window (collection keeps up and back-pressure holds the collectors), else the collection stage where the
    episodes that ended in the window spent most of their wall time (``policy``, ``env``, or ``queue``: waiting
    for a concurrency slot or the event loop), or ``collection`` when none ended."""
    if trainer_wait_frac < 0.5:
        return "trainer"
    if not any(stage_s.get(s, 0.0) > 0 for s in ("policy", "env", "queue")):
        return "collection"
    return max(("policy", "env", "queue"), key=lambda s: stage_s.get(s, 0.0))


def stage_metrics(trainer_wait_frac: float, stage_s: dict[str, float]) -> dict[str, float]:
    """Scalars for metrics.jsonl: the trainer's wait share, each collection stage's share of the episodes' wall
    time, and ``bottleneck/<stage>`` = 1 for the stage `bottleneck` names (0 for the others)."""
    total = sum(stage_s.get(s, 0.0) for s in ("policy", "env", "queue")) or 1.0
    out = {"stage/trainer_wait_frac": round(trainer_wait_frac, 4)}
    out.update({f"stage/{s}_share": round(stage_s.get(s, 0.0) / total, 4) for s in ("policy", "env", "queue")})
    name = bottleneck(trainer_wait_frac, stage_s)
    out.update({f"bottleneck/{s}": float(s == name) for s in STAGES})
    return out


class StageWindow:
    """The trainer's wait and the collection stages summed over the last `updates` updates: one update alone is
    too bursty to name a bottleneck (a wave of episodes that end together fills the queue for several updates)."""

    def __init__(self, updates: int = 8) -> None:
        self._rows: deque[tuple[float, float, dict[str, float]]] = deque(maxlen=max(1, updates))

    def add(self, wall_s: float, waited_s: float, stage_s: dict[str, float]) -> dict[str, float]:
        """Record one update's window (its wall time, the trainer's wait in it, the stage seconds of the episodes
        that ended in it); the `stage_metrics` of the last `updates` windows together."""
        self._rows.append((wall_s, max(0.0, waited_s), stage_s))
        wall = sum(r[0] for r in self._rows) or 1e-9
        stages = {s: sum(r[2].get(s, 0.0) for r in self._rows) for s in ("policy", "env", "queue")}
        return stage_metrics(min(1.0, sum(r[1] for r in self._rows) / wall), stages)


def bottleneck_name(row: dict[str, float]) -> str:
    """The stage a metrics row names as the bottleneck ("-" when it names none)."""
    return next((s for s in STAGES if row.get(f"bottleneck/{s}") == 1.0), "-")


def histogram(values: Counter[int]) -> dict[int, int]:
    return {k: values[k] for k in sorted(values)}
