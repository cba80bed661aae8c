"""Browser-v0: web tasks in real Chromium, seen as an accessibility tree, driven by text actions.

Each episode gets a fresh browser context (cookies and storage of its own)
whose only reachable origin is the task site, served from this process (see
`session.py`); every other request is blocked and counted in
``info["blocked_requests"]``. The observation is the page tree with a bid on
every element (`observation.py`), the URL and title, and the last action's
error; with ``screenshots="png"`` or ``"marks"`` each step also writes a PNG
(plain, or set-of-marks with bid labels) and puts its path into
``info["screenshot"]``, which the viewer shows per turn.

Failures: a malformed action, a missing or hidden element or an action the
page refuses is an error observation with ``info["error_kind"]``; an action
after which the page stops answering within `step_timeout_s` (or an episode
past `episode_timeout_s` of browser time) truncates the episode as the
model's failure; a crashed page or browser raises `EnvInfraError`, which ends
only that episode, as an infrastructure failure, and the next `reset` gets a
fresh browser.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from agentgym.envs.browser.actions import USAGE, BrowserAction, parse_action, tool_schemas
from agentgym.envs.browser.driver import CHROMIUM, shared_driver
from agentgym.envs.browser.observation import PageView, render
from agentgym.envs.browser.session import ActionFailed, BrowserSession
from agentgym.envs.browser.sites.base import Outcome
from agentgym.envs.browser.suites import (
    EpisodeRun,
    SitesSuite,
    Suite,
    plan_action,
    random_words,
    site_classes,
)

from agentgym.core import AgentEnv, fingerprint_text
from agentgym.errors import ConfigError, EnvInfraError, MalformedActionError
from agentgym.toolcalls import error_observation

SYSTEM_PROMPT = (
    "You operate a web browser to complete a task. Each observation shows the page as a tree: one element per "
    "line, '[bid] role \"name\"' with its value and states. Reply with exactly one action on the last line: "
    f"{USAGE}. Use the bids of the current page. When the task asks for information, or when you are done, "
    "call answer(\"...\")."
)
SCREENSHOT_MODES = ("none", "png", "marks", "both")
DIFFICULTIES = ("easy", "medium", "hard")


class BrowserEnv(AgentEnv):
    """Web tasks on local sites or MiniWoB++ in headless Chromium; see the module docstring."""

    system_prompt = SYSTEM_PROMPT
    #: the envs share one Playwright thread and call it from any thread (see driver.py)
    thread_safe = True

    def __init__(self, suite: str = "sites", sites: tuple[str, ...] | list[str] = ("shop", "forms", "mail"),
                 difficulty: str | None = None, task: str | None = None, max_turns: int = 30,
                 prune: bool = True, max_obs_chars: int = 6000, screenshots: str = "none",
                 screenshot_dir: str | None = None, step_timeout_s: float = 20.0, episode_timeout_s: float = 300.0,
                 action_timeout_s: float = 3.0, episodes_per_browser: int = 32, viewport: tuple[int, int] = (800, 600),
                 max_action_chars: int = 100_000, max_fill_chars: int = 10_000, chromium: str = CHROMIUM,
                 render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        self._check_config(suite, difficulty, screenshots, max_turns, max_obs_chars, step_timeout_s, action_timeout_s)
        self.suite: Suite = self._make_suite(suite, tuple(sites), difficulty, task)
        self.suite_name = suite
        self.deterministic = suite != "miniwob"  # type: ignore[misc]  # MiniWoB tasks run on timers
        self.max_turns, self.prune, self.max_obs_chars = max_turns, prune, max_obs_chars
        self.screenshots = screenshots
        self.screenshot_dir = Path(screenshot_dir) if screenshot_dir else None
        self.step_timeout_s, self.episode_timeout_s = step_timeout_s, episode_timeout_s
        self.action_timeout_s, self.viewport = action_timeout_s, tuple(viewport)
        self.max_action_chars, self.max_fill_chars = max_action_chars, max_fill_chars
        self.driver = shared_driver(executable=chromium, episodes_per_browser=episodes_per_browser)
        self._session: BrowserSession | None = None
        self._run: EpisodeRun | None = None
        self._view: PageView | None = None
        self._instruction = ""
        self._turn = 0
        self._spent_s = 0.0
        self._plan_pos = 0
        self._solver_expect: str | None = None
        self._episode_uid = ""
        self._done = False

    @staticmethod
    def _check_config(suite: str, difficulty: str | None, screenshots: str, *positive: float) -> None:
        if suite not in ("sites", "miniwob"):
            raise ConfigError(f"unknown Browser-v0 suite {suite!r}; choose 'sites' or 'miniwob'")
        if difficulty is not None and difficulty not in DIFFICULTIES:
            raise ConfigError(f"unknown difficulty {difficulty!r}; choose one of {DIFFICULTIES}")
        if screenshots not in SCREENSHOT_MODES:
            raise ConfigError(f"screenshots={screenshots!r}; choose one of {SCREENSHOT_MODES}")
        if min(positive) <= 0:
            raise ConfigError("max_turns, max_obs_chars and the timeouts must be positive")

    @staticmethod
    def _make_suite(suite: str, sites: tuple[str, ...], difficulty: str | None, task: str | None) -> Suite:
        if suite == "miniwob":
            from agentgym.envs.browser.miniwob import MiniWobSuite

            made: Suite = MiniWobSuite(tasks=(task,) if task else None)
        else:
            made = SitesSuite(site_classes(sites), (difficulty,) if difficulty else None)
            if task is not None:
                if task not in made.task_ids():
                    raise ConfigError(f"unknown Browser-v0 task {task!r}; e.g. {made.task_ids()[0]!r}")
                made.keep_only(task)
        if not made.task_ids():
            raise ConfigError(f"Browser-v0 suite {suite!r} has no tasks with these filters")
        return made

    # ---- contract --------------------------------------------------------
    def task_ids(self) -> list[str]:
        return self.suite.task_ids()

    def tools(self) -> list[dict[str, Any]]:
        return tool_schemas()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        task_id = self.choose_task(options, self.suite.task_ids())
        return self.driver.call(self._reset(task_id, seed), timeout_s=self.step_timeout_s + 90)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return self.driver.call(self._step(action), timeout_s=self.step_timeout_s + 60)

    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        task_id = self.choose_task(options, self.suite.task_ids())
        result = await self.driver.acall(self._reset(task_id, seed))
        self._last_observation = result[0]
        return result

    async def astep(self, action: str):
        result = await self.driver.acall(self._step(action))
        self._last_observation = result[0]
        return result

    def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            try:
                self.driver.call(session.close(), timeout_s=60)
            except Exception:  # closing a dead browser must not raise; the pool forgets it
                pass

    # ---- episode (driver thread) ----------------------------------------
    async def _reset(self, task_id: str, seed: int | None) -> tuple[str, dict[str, Any]]:
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()
        self._run = self.suite.start(task_id, seed)
        self._turn, self._spent_s, self._plan_pos, self._done = 0, 0.0, 0, False
        self._solver_expect, self._episode_uid = None, uuid.uuid4().hex[:12]
        session = BrowserSession(self.driver, self._run.handlers, viewport=self.viewport,  # type: ignore[arg-type]
                                 action_timeout_s=self.action_timeout_s)
        self._session = session
        started = time.perf_counter()
        try:
            await asyncio.wait_for(session.open(self._run.start_url), self.step_timeout_s + 60)
            self._instruction = await asyncio.wait_for(self._run.begin(session, seed), self.step_timeout_s)
            observation, info = await self._observe(None)
        except Exception as exc:
            raise self._infra(exc, "reset") from exc
        info.update(task_id=task_id, difficulty=self._run.difficulty, suite=self.suite_name,
                    context_start_s=round(time.perf_counter() - started, 4))
        return observation, info

    def _infra(self, exc: BaseException, where: str) -> EnvInfraError:
        session = self._session
        what = ("the page crashed" if session is not None and session.crashed else
                "the browser died" if session is not None and session.browser_dead else
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return EnvInfraError(f"Browser-v0 {where}: {what}", kind="browser_crashed")

    async def _step(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._session is None or self._run is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode is over; call reset()")
        self._turn += 1
        self._advance_solver(text)
        started = time.perf_counter()
        try:
            result = await asyncio.wait_for(self._act(text), self.step_timeout_s)
        except TimeoutError:
            if self._session.crashed or self._session.browser_dead:
                raise self._infra(TimeoutError(), "step") from None
            return self._timed_out(f"the page did not answer within {self.step_timeout_s:g} s after the action")
        except (EnvInfraError, MalformedActionError):
            raise
        except Exception as exc:
            if self._session.crashed or self._session.browser_dead or _closed(exc):
                raise self._infra(exc, "step") from exc
            raise
        self._spent_s += time.perf_counter() - started
        observation, reward, terminated, truncated, info = result
        if not terminated and self._spent_s > self.episode_timeout_s:
            return self._timed_out(f"the episode used {self._spent_s:.0f} s of browser time "
                                   f"(limit {self.episode_timeout_s:g} s)")
        if not terminated and self._turn >= self.max_turns:
            truncated = True
            info["truncation_reason"] = f"turn limit {self.max_turns}"
        self._done = terminated or truncated
        return observation, reward, terminated, truncated, info

    def _timed_out(self, reason: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        self._done = True
        observation = f"The episode ends: {reason}."
        return observation, 0.0, False, True, {"error_kind": "action_timeout", "failure": "model",
                                               "truncation_reason": reason}

    async def _act(self, text: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        assert self._session is not None and self._run is not None
        try:
            action = parse_action(text, max_chars=self.max_action_chars)
            self._check_size(action)
        except MalformedActionError as exc:
            observation, info = await self._observe(error_observation(exc, hint=exc.hint))
            info["error_kind"] = exc.kind
            return observation, 0.0, False, False, info
        error = None
        try:
            await self._session.act(action)
        except ActionFailed as exc:
            error = str(exc)
        outcome: Outcome = await self._run.outcome(self._session, action.text if action.name == "answer" else None)
        observation, info = await self._observe(error)
        if error:
            info["error_kind"] = "action_failed"
        info.update(action=str(action), outcome=outcome.detail, success=outcome.success)
        return observation, float(outcome.reward if outcome.done else 0.0), outcome.done, False, info

    def _check_size(self, action: BrowserAction) -> None:
        if action.text is not None and len(action.text) > self.max_fill_chars:
            raise MalformedActionError(
                f"{action.name}(...) text is {len(action.text)} characters, over the {self.max_fill_chars} limit",
                kind="invalid_arguments", hint="send shorter text")

    async def _observe(self, error: str | None) -> tuple[str, dict[str, Any]]:
        assert self._session is not None
        view = await self._session.view()
        self._view = view
        header = f"Task: {self._instruction}"
        observation = render(view, prune=self.prune, max_chars=self.max_obs_chars, header=header, error=error)
        info: dict[str, Any] = {"url": view.url, "title": view.title, "turn": self._turn,
                                "blocked_requests": self._session.stats.blocked}
        if self._session.stats.blocked_urls:
            info["blocked_urls"] = list(self._session.stats.blocked_urls[:10])
        if error:
            info["last_action_error"] = error
        if self.screenshots != "none":
            info.update(await self._screenshots(view))
        return observation, info

    async def _screenshots(self, view: PageView) -> dict[str, str]:
        assert self._session is not None
        folder = self.screenshot_dir or Path(tempfile.gettempdir()) / "agentgym-browser-shots"
        folder.mkdir(parents=True, exist_ok=True)
        shots: dict[str, str] = {}
        stem = f"{self._episode_uid}-{self._turn:03d}"
        if self.screenshots in ("png", "both"):
            path = folder / f"{stem}.png"
            path.write_bytes(await self._session.screenshot())
            shots["screenshot"] = str(path)
        if self.screenshots in ("marks", "both"):
            path = folder / f"{stem}-marks.png"
            path.write_bytes(await self._session.screenshot(marks=[n.bid for n in view.interactive_bids()]))
            shots["screenshot_marks"] = str(path)
        return shots

    # ---- solver, random actions, fingerprint ----------------------------
    def _advance_solver(self, text: str) -> None:
        if self._solver_expect is not None and text.strip() == self._solver_expect:
            self._plan_pos += 1
        self._solver_expect = None

    def solver_action(self) -> str:
        """The scripted solver's next action: its plan's next step, resolved to a bid on this page.

        When the page is not where the plan expects (another policy drove the
        episode off it), the solver goes back to the task's start page and
        begins its plan again.
        """
        if self._run is None or self._view is None:
            raise RuntimeError("call reset() before solver_action()")
        step = self._run.solver_step(self._view, self._plan_pos)
        if step is None:
            return 'answer("done")'
        action = plan_action(step, self._view)
        if action is None:
            if self._plan_pos == 0 and self._view.url == self._run.start_url:
                raise RuntimeError(f"solver step 0 {step} finds no element on the start page {self._view.url}")
            self._plan_pos = 0
            action = str(BrowserAction("goto", text=self._run.start_url))
            self._solver_expect = None
            return action
        self._solver_expect = action
        return action

    def valid_actions(self) -> list[str] | None:
        if self._view is None:
            return None
        rng = self.np_random
        words = random_words(_Rng(rng), self._instruction)
        actions: list[str] = []
        for node in self._view.interactive_bids():
            if node.role in ("textbox", "searchbox", "spinbutton"):
                actions.append(str(BrowserAction("fill", bid=node.bid, text=" ".join(words))))
            elif node.role == "combobox":
                options = [n.name for n in self._options(node.bid)]
                actions += [str(BrowserAction("select", bid=node.bid, text=o)) for o in options[:8]]
            else:
                actions.append(str(BrowserAction("click", bid=node.bid)))
        return actions + ["back()", "scroll(0, 300)"] if actions else ["back()", "scroll(0, 300)"]

    def _options(self, bid: str) -> list[Any]:
        assert self._view is not None
        nodes = list(self._view.nodes)
        start = next(i for i, n in enumerate(nodes) if n.bid == bid)
        found = []
        for node in nodes[start + 1:]:
            if node.role != "option" or node.depth <= nodes[start].depth:
                break
            found.append(node)
        return found

    def state_fingerprint(self) -> str:
        if self._view is None:
            return fingerprint_text(self._last_observation)
        return fingerprint_text(render(self._view, prune=True, max_chars=10**9))


class _Rng:
    """`random.Random`-like sampling over a numpy Generator (the env's seeded `np_random`)."""

    def __init__(self, generator: Any):
        self.generator = generator

    def sample(self, items: list[str], k: int) -> list[str]:
        picked = self.generator.choice(len(items), size=k, replace=False)
        return [items[int(i)] for i in picked]


def _closed(exc: BaseException) -> bool:
    text = str(exc)
    return "has been closed" in text or "Target crashed" in text or "Browser closed" in text
