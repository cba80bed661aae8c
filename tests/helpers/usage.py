"""What the usage tests check of an env's CPU and memory figures: that they were reported, not how large they are
(their size is a figure of bench/cost_accounting.py, measured side by side)."""

from __future__ import annotations


def reported(value: object) -> bool:
    """A usage figure was reported: a number, not None (a worker's real CPU seconds or peak MB)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= 0
