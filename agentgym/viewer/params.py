"""Query-string parameters of the viewer's listings, parsed with errors a person can act on."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any
from urllib.parse import urlencode

from agentgym.errors import AgentGymError
from agentgym.store import EpisodeFilter
from agentgym.viewer.queries import FAILURES, SORTABLE, STATUSES

MAX_PAGE_SIZE = 500


class ViewerInputError(AgentGymError):
    """A query parameter or form field the viewer cannot use (shown as an HTTP 400 page)."""


@dataclass(frozen=True)
class ListParams:
    """Filters, sort and page of an episode (or task/group) listing."""

    run: str | None = None
    env: str | None = None
    task: str | None = None
    group: str | None = None
    status: str | None = None
    failure: str | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    version: int | None = None
    sort: str = "created_at"
    order: str = "desc"
    page: int = 1
    size: int = 50

    def filter(self) -> EpisodeFilter:
        return EpisodeFilter(run_id=self.run, env_id=self.env, task_id=self.task, group_id=self.group,
                             status=self.status, failure=self.failure, min_reward=self.min_reward,
                             max_reward=self.max_reward, policy_version=self.version)

    def query(self, **changes: Any) -> str:
        """The query string of these params with `changes` applied (defaults left out)."""
        params = replace(self, **changes)
        defaults = ListParams()
        items = {f.name: getattr(params, f.name) for f in fields(params)
                 if getattr(params, f.name) is not None and getattr(params, f.name) != getattr(defaults, f.name)}
        return urlencode(items)

    def sort_query(self, column: str) -> str:
        """Link target of a sortable column header: toggles the order when already sorted by it."""
        order = "asc" if self.sort == column and self.order == "desc" else "desc"
        return self.query(sort=column, order=order, page=1)

    @property
    def descending(self) -> bool:
        return self.order == "desc"

    @property
    def active(self) -> bool:
        """Whether any filter is set."""
        return any(getattr(self, n) is not None for n in ("run", "env", "task", "group", "status", "failure",
                                                          "min_reward", "max_reward", "version"))


def _text(raw: Mapping[str, str], name: str) -> str | None:
    value = raw.get(name, "").strip()
    return value or None


def _number(raw: Mapping[str, str], name: str, kind: type, low: float | None = None) -> Any:
    text = _text(raw, name)
    if text is None:
        return None
    try:
        value = kind(text)
    except ValueError:
        raise ViewerInputError(
            f"{name}={text!r} is not a{'n integer' if kind is int else ' number'}; "
            f"use e.g. {name}={'2' if kind is int else '0.5'} or leave it empty") from None
    if low is not None and value < low:
        raise ViewerInputError(f"{name}={text} must be at least {low:g}")
    return value


def parse_list_params(raw: Mapping[str, str]) -> ListParams:
    """`ListParams` from a request's query parameters, or `ViewerInputError` naming the bad one."""
    status, failure = _text(raw, "status"), _text(raw, "failure")
    if status is not None and status not in STATUSES:
        raise ViewerInputError(f"status={status!r} is not an episode status; use one of {', '.join(STATUSES)}")
    if failure is not None and failure not in FAILURES:
        raise ViewerInputError(f"failure={failure!r} is not a failure type; use one of {', '.join(FAILURES)}")
    sort = _text(raw, "sort") or "created_at"
    if sort not in SORTABLE:
        raise ViewerInputError(f"sort={sort!r} is not a sortable column; use one of {', '.join(SORTABLE)}")
    order = _text(raw, "order") or "desc"
    if order not in ("asc", "desc"):
        raise ViewerInputError(f"order={order!r} must be 'asc' or 'desc'")
    params = ListParams(
        run=_text(raw, "run"), env=_text(raw, "env"), task=_text(raw, "task"), group=_text(raw, "group"),
        status=status, failure=failure, min_reward=_number(raw, "min_reward", float),
        max_reward=_number(raw, "max_reward", float), version=_number(raw, "version", int),
        sort=sort, order=order, page=_number(raw, "page", int, 1) or 1, size=_number(raw, "size", int, 1) or 50)
    if params.size > MAX_PAGE_SIZE:
        raise ViewerInputError(f"size={params.size} is too large; pages hold at most {MAX_PAGE_SIZE} rows")
    if params.min_reward is not None and params.max_reward is not None and params.min_reward > params.max_reward:
        raise ViewerInputError(
            f"min_reward={params.min_reward:g} is above max_reward={params.max_reward:g}; swap them")
    return params


@dataclass(frozen=True)
class ReplayForm:
    """The episode page's "replay from turn" form."""

    from_turn: int
    policy: str
    seed: int


def parse_replay_form(raw: Mapping[str, str], num_turns: int) -> ReplayForm:
    turn = _number(raw, "from_turn", int, 0)
    if turn is None:
        raise ViewerInputError("choose the turn to branch from (from_turn)")
    if turn >= num_turns:
        raise ViewerInputError(f"from_turn={turn} is past the episode's last turn ({num_turns - 1})")
    policy = _text(raw, "policy") or "random"
    if policy == "scripted":
        target = _text(raw, "scripted") or ""
        if not target:
            raise ViewerInputError("a scripted policy needs MODULE:FUNC, e.g. mypkg.policies:always_up")
        policy = f"scripted:{target}"
    return ReplayForm(from_turn=turn, policy=policy, seed=_number(raw, "seed", int) or 0)
