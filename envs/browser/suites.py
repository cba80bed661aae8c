"""Task suites: where an episode's tasks, pages, rewards and solver come from.

A suite lists task ids and starts an `EpisodeRun` for one of them. The run
names the origins the browser may reach and their handlers, the start URL,
and answers three questions on the driver thread: the instruction, the
outcome so far (from server-side state for the local sites, from MiniWoB's
own reward for MiniWoB), and the solver's next step.
"""

from __future__ import annotations

import random
from typing import Protocol

from agentgym.envs.browser.observation import PageView
from agentgym.envs.browser.session import BrowserSession, Handler
from agentgym.envs.browser.sites.base import Outcome, Site, SiteTask, Step


class EpisodeRun(Protocol):
    """One episode of one task."""

    task_id: str
    difficulty: str
    handlers: dict[str, Handler]
    start_url: str

    async def begin(self, session: BrowserSession, seed: int | None) -> str:
        """Set the task up on the opened page; return the instruction."""

    async def outcome(self, session: BrowserSession, answer: str | None) -> Outcome:
        """Whether the episode is over and its reward (`answer` is set when the agent called answer)."""

    def solver_step(self, view: PageView, position: int) -> Step | None:
        """The solver's step number `position` on this page (None when it has nothing left to do)."""


class Suite(Protocol):
    name: str

    def task_ids(self) -> list[str]: ...

    def difficulty(self, task_id: str) -> str: ...

    def start(self, task_id: str, seed: int | None) -> EpisodeRun: ...


class SiteRun:
    """An episode on one of the local task sites."""

    def __init__(self, site: Site):
        self.site, self.task = site, site.task
        self.task_id, self.difficulty = site.task.id, site.task.difficulty
        self.handlers: dict[str, Handler] = {site.origin: site.handle}
        self.start_url = site.origin + site.task.start

    async def begin(self, session: BrowserSession, seed: int | None) -> str:
        return self.task.instruction

    async def outcome(self, session: BrowserSession, answer: str | None) -> Outcome:
        return self.site.outcome(answer)

    def solver_step(self, view: PageView, position: int) -> Step | None:
        return self.task.plan[position] if position < len(self.task.plan) else None


class SitesSuite:
    """The local task sites (shop, forms, mail), each with its generated tasks."""

    name = "sites"

    def __init__(self, sites: list[type[Site]], difficulties: tuple[str, ...] | None = None):
        self.sites = {s.name: s for s in sites}
        self._tasks: dict[str, SiteTask] = {}
        for site in sites:
            for task in site.tasks():
                if difficulties is None or task.difficulty in difficulties:
                    self._tasks[task.id] = task

    def task_ids(self) -> list[str]:
        return list(self._tasks)

    def keep_only(self, task_id: str) -> None:
        """Pose only this task (``task=...`` in the env's arguments)."""
        self._tasks = {task_id: self._tasks[task_id]}

    def difficulty(self, task_id: str) -> str:
        return self._tasks[task_id].difficulty

    def task(self, task_id: str) -> SiteTask:
        return self._tasks[task_id]

    def start(self, task_id: str, seed: int | None) -> EpisodeRun:
        task = self._tasks[task_id]
        return SiteRun(self.sites[task.site](task))


def random_words(rng: random.Random, text: str, k: int = 3) -> list[str]:
    """A few words of `text` (the random policy types them into text fields)."""
    words = [w.strip(".,'\"$") for w in text.split() if len(w) > 2]
    return rng.sample(words, min(k, len(words))) if words else ["test"]


def plan_action(step: Step, view: PageView) -> str | None:
    """The action text of a solver step on this page (None when its element is not on the page)."""
    from agentgym.envs.browser.actions import BrowserAction

    if step.op == "goto":
        return str(BrowserAction("goto", text=step.arg))
    if step.op == "answer":
        return str(BrowserAction("answer", text=step.arg))
    node = view.find(step.role, step.name) or (step.name and next(
        (n for n in view.nodes if n.visible and step.name.casefold() in (" ".join(n.name.split()).casefold(),
                                                                         n.text.casefold())), None)) or None
    if node is None:
        return None
    return str(BrowserAction(step.op, bid=node.bid, text=step.arg))


def site_classes(names: tuple[str, ...]) -> list[type[Site]]:
    """The site classes named (``shop``, ``forms``, ``mail``)."""
    from agentgym.envs.browser.sites import SITES

    unknown = sorted(set(names) - set(SITES))
    if unknown:
        from agentgym.errors import ConfigError

        raise ConfigError(f"unknown Browser-v0 site(s) {unknown}; choose from {sorted(SITES)}")
    return [SITES[n] for n in names]

