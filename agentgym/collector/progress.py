"""Live counters of a collection and the rich progress bar that shows them.

The episode loop only increments integers (`Counters`); the bar reads them
when rich refreshes it (a few times a second), so progress costs nothing per
turn.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text


@dataclass
class Counters:
    """Totals since `started`."""

    started: float = field(default_factory=time.perf_counter)
    episodes: int = 0
    errors: int = 0
    turns: int = 0
    tokens: int = 0
    windowed: int = 0  #: turns whose prompt a context window cut

    def rates(self) -> tuple[float, float, float]:
        """(episodes/s, turns/s, tokens/s)."""
        dt = max(time.perf_counter() - self.started, 1e-9)
        return self.episodes / dt, self.turns / dt, self.tokens / dt


class _RateColumn(ProgressColumn):
    def __init__(self, counters: Counters):
        super().__init__()
        self.counters = counters

    def render(self, task: object) -> Text:
        eps, tps, toks = self.counters.rates()
        errors = f"  [{self.counters.errors} errors]" if self.counters.errors else ""
        return Text(f"{eps:.1f} ep/s  {tps:.0f} turns/s  {toks:.0f} tok/s{errors}")


class CollectProgress:
    """A rich progress bar over `total` episodes (a no-op when `enabled` is False)."""

    def __init__(self, counters: Counters, total: int, description: str, enabled: bool):
        self.counters = counters
        self._bar: Progress | None = None
        if enabled:
            self._bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), _RateColumn(counters), refresh_per_second=4)
            self._task = self._bar.add_task(description, total=total)

    def __enter__(self) -> CollectProgress:
        if self._bar is not None:
            self._bar.start()
        return self

    def advance(self) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=self.counters.episodes)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self.advance()
            self._bar.stop()
