"""The estimator registry and the two entry points, `compute_credit` and `compute_advantages`.

An estimator is a pure function `fn(batch: TurnBatch, *, <params>) -> CreditResult` registered by
name. Its parameters are explicit keyword arguments with the defaults of docs/algorithms.md; unknown names
and unknown parameters are rejected with the closest valid ones.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.credit.batch import TurnBatch
from agentgym.credit.errors import CreditParamError, UnknownEstimatorError
from agentgym.credit.result import CreditResult
from agentgym.trajectory import Episode

EstimatorFn = Callable[..., CreditResult]


@dataclass(frozen=True)
class Estimator:
    """A registered estimator: its function, a one-line summary and what it needs besides rewards."""

    name: str
    fn: EstimatorFn
    summary: str
    needs: tuple[str, ...] = ()  #: inputs beyond group ids and rewards, for messages and docs
    group_relative: bool = True  #: advantages are relative to the other rollouts of a group
    uses_critic: bool = False  #: produces value targets (`CreditResult.returns`)

    @property
    def params(self) -> dict[str, Any]:
        """Parameter names and their defaults (`inspect.Parameter.empty` where required)."""
        sig = inspect.signature(self.fn)
        return {n: p.default for n, p in sig.parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY}

    def check_params(self, given: Mapping[str, Any]) -> None:
        known = self.params
        for key in given:
            if key not in known:
                close = difflib.get_close_matches(key, list(known), n=3, cutoff=0.5)
                hint = f" Did you mean: {', '.join(close)}?" if close else ""
                raise CreditParamError(f"estimator '{self.name}' has no parameter '{key}'.{hint} "
                                       f"Its parameters: {', '.join(known) or '(none)'}.")


class EstimatorRegistry(Mapping[str, Estimator]):
    """Name -> `Estimator`. Iterating gives the names; `in` tests a name."""

    def __init__(self) -> None:
        self._items: dict[str, Estimator] = {}

    def register(self, name: str, *, summary: str, needs: Sequence[str] = (), group_relative: bool = True,
                 uses_critic: bool = False) -> Callable[[EstimatorFn], EstimatorFn]:
        """Decorator registering `fn` under `name` (a name is registered once)."""

        def deco(fn: EstimatorFn) -> EstimatorFn:
            if name in self._items and self._items[name].fn is not fn:
                raise CreditParamError(f"estimator '{name}' is already registered; pick another name.")
            self._items[name] = Estimator(name, fn, summary, tuple(needs), group_relative, uses_critic)
            return fn

        return deco

    def __getitem__(self, name: str) -> Estimator:
        """By registered name, or as 'package.module:name' (the module is imported first; it registers)."""
        try:
            return self._items[name]
        except KeyError:
            pass
        module, _, short = str(name).rpartition(":")
        if module:
            try:
                importlib.import_module(module)
            except ImportError as exc:
                raise UnknownEstimatorError(f"estimator '{name}': cannot import module '{module}': {exc}") from None
            if short in self._items:
                return self._items[short]
        known = sorted(self._items)
        close = difflib.get_close_matches(str(name).lower(), known, n=3, cutoff=0.5)
        hint = f" Did you mean: {', '.join(close)}?" if close else ""
        raise UnknownEstimatorError(f"no credit estimator named '{name}'.{hint} Known: {', '.join(known)}.")

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"EstimatorRegistry({', '.join(self._items)})"


ESTIMATORS = EstimatorRegistry()
register_estimator = ESTIMATORS.register


def compute_credit(name: str, episodes: Sequence[Episode] | TurnBatch, **params: Any) -> CreditResult:
    """Run estimator `name` on `episodes` (or a prebuilt `TurnBatch`) with keyword `params`.

    Returns a `CreditResult` (flat [T] advantages, and returns / parts where the estimator has them).
    """
    estimator = ESTIMATORS[name]
    estimator.check_params(params)
    batch = episodes if isinstance(episodes, TurnBatch) else TurnBatch.from_episodes(episodes)
    return estimator.fn(batch, **params)


def compute_advantages(name: str, episodes: Sequence[Episode] | TurnBatch, **params: Any) -> list[list[float]]:
    """Per episode, one advantage per turn (see `compute_credit` for the full result)."""
    return compute_credit(name, episodes, **params).per_episode()
