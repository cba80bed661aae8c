"""The guard against a run that spins without learning: curation dropping every group, round after round.

A round without signal is one full collection attempt that left the trainer nothing to train on:
in sync mode a `collect_batch` that returned nothing after its refill rounds, in async mode a batch's
worth of episodes dropped since the last batch was trained. Each such round prints a warning line in
the run's table; after `limit` rounds in a row the run stops (`stopped_by="no_signal"`).
"""

from __future__ import annotations

from collections.abc import Mapping

from rich.console import Console


class SignalWatch:
    """Counts rounds without a trainable batch; `limit` None only warns."""

    def __init__(self, limit: int | None, console: Console):
        self.limit, self.console = limit, console
        self.rounds = 0
        self._dropped_at_last_batch = 0

    def trained(self, dropped: Mapping[str, int] | None = None) -> None:
        """A batch was trained (with the data manager's drop counters, async mode): the count starts again."""
        self.rounds = 0
        if dropped is not None:
            self._dropped_at_last_batch = sum(dropped.values())

    def empty_round(self, dropped: Mapping[str, int]) -> bool:
        """One more round without signal; True when the run should stop."""
        self.rounds += 1
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(dropped.items()) if v) or "none"
        stop = self.limit is not None and self.rounds >= self.limit
        self.console.print(
            f"[yellow]no learning signal for {self.rounds} round{'s' if self.rounds != 1 else ''}[/]: curation "
            f"dropped every group (episodes dropped so far: {reasons}). Every rollout of a task scoring the same "
            "leaves a group-relative estimator nothing to compare: use easier or harder tasks, a larger "
            "group_size, or drop_zero_variance: false."
            + (" Stopping (stop_without_signal)." if stop else ""))
        return stop

    def dropped_meanwhile(self, dropped: Mapping[str, int], episodes_per_batch: int) -> bool:
        """Async mode: count a round for each batch's worth of episodes dropped since the last batch."""
        total = sum(dropped.values())
        rounds = (total - self._dropped_at_last_batch) // max(1, episodes_per_batch)
        while self.rounds < rounds:
            if self.empty_round(dropped):
                return True
        return False
