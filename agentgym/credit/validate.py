"""Parameter checks shared by the estimators; errors name the value, the rule and the fix."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from agentgym.credit.errors import CreditParamError


def choice(estimator: str, name: str, value: Any, allowed: Iterable[Any]) -> None:
    """`value` must be one of `allowed`."""
    allowed = tuple(allowed)
    if value not in allowed:
        raise CreditParamError(f"{estimator}: {name}={value!r} is not one of {', '.join(map(repr, allowed))}.")


def number(estimator: str, name: str, value: Any, *, low: float | None = None, high: float | None = None,
           low_open: bool = False) -> None:
    """`value` must be a finite number inside [low, high] (or (low, high] with `low_open`)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if ok and low is not None:
        ok = value > low if low_open else value >= low
    if ok and high is not None:
        ok = value <= high
    if not ok:
        lo = "-inf" if low is None else f"{low}"
        rule = f"{'(' if low_open else '['}{lo}, {'inf' if high is None else high}]"
        raise CreditParamError(f"{estimator}: {name}={value!r} must be a finite number in {rule}.")
