"""MiniWoB++ through Browser-v0: the `miniwob` package's HTML tasks, served locally, with MiniWoB's own reward.

``agentgym.make("Browser-v0", suite="miniwob", task="click-button")`` (or no
`task` for all of them) serves ``miniwob/html`` from the package at
``http://miniwob.test/`` through the same isolated context, observation and
actions as the local sites. `begin` seeds the task's generator with the
episode seed (MiniWoB's ``Math.seedrandom``), lifts MiniWoB's 10-second
real-time limit to the env's `episode_timeout_s` (an LLM turn is slower than
a human click), and starts the episode; the instruction is MiniWoB's
utterance. After each action the env reads ``WOB_DONE_GLOBAL`` and the raw
reward ``WOB_RAW_REWARD_GLOBAL`` (1 success, -1 failure, partial credit in
between for some tasks, without MiniWoB's time decay). The episode ends when
MiniWoB ends it, or with -1 when the agent navigates away from the task page.

A scripted solver (`SOLVERS`) handles the tasks named there by reading the
utterance; tasks without one have no solver step.
"""

from __future__ import annotations

import mimetypes
import re
from collections.abc import Callable
from pathlib import Path

from agentgym.envs.browser.observation import PageView
from agentgym.envs.browser.session import BrowserSession, Handler
from agentgym.envs.browser.sites.base import Outcome, Request, Response, Step

from agentgym.errors import ConfigError, require

ORIGIN = "http://miniwob.test"


def html_dir() -> Path:
    """The ``html`` folder of the installed `miniwob` package."""
    package = require("miniwob", extra="browser", what="Browser-v0's MiniWoB++ suite")
    return Path(package.__file__).resolve().parent / "html"


def miniwob_tasks() -> list[str]:
    """Every MiniWoB++ task the package ships (``html/miniwob/*.html``)."""
    return sorted(p.stem for p in (html_dir() / "miniwob").glob("*.html"))


def static_handler(root: Path) -> Handler:
    """Serve files under `root` (and nothing outside it)."""
    root = root.resolve()

    def handle(request: Request) -> Response:
        path = (root / request.path.lstrip("/")).resolve()
        if not path.is_relative_to(root) or not path.is_file():
            return Response(f"no file {request.path}", status=404, content_type="text/plain")
        kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        if kind.startswith("text/") or kind in ("application/javascript", "application/json"):
            kind += "; charset=utf-8"
        return Response(path.read_bytes(), content_type=kind)

    return handle


class MiniWobRun:
    """One MiniWoB++ episode."""

    difficulty = "miniwob"

    def __init__(self, task_id: str, handler: Handler, max_time_s: float):
        self.task_id = task_id
        self.handlers: dict[str, Handler] = {ORIGIN: handler}
        self.start_url = f"{ORIGIN}/miniwob/{task_id}.html"
        self.max_time_ms = int(max_time_s * 1000)
        self.utterance = ""
        self.plan: list[Step] = []

    async def begin(self, session: BrowserSession, seed: int | None) -> str:
        await session.page.wait_for_function("() => typeof core !== 'undefined' && core.startEpisodeReal")
        await session.page.evaluate(
            """([seed, maxMs]) => {
                 core.EPISODE_MAX_TIME = maxMs;
                 if (seed !== null) Math.seedrandom(seed);
                 core.setDataMode('train');
                 core.startEpisodeReal();
                 window.__agentgymEpisode = true;
               }""", [seed if seed is None else str(seed), self.max_time_ms])
        await session.page.wait_for_function("() => WOB_TASK_READY !== false", timeout=10_000)
        utterance = await session.page.evaluate("() => core.getUtterance()")
        # some tasks answer {utterance, fields} (natural-language variants); the text is the instruction
        self.utterance = str(utterance.get("utterance", "")) if isinstance(utterance, dict) else str(utterance)
        solver = SOLVERS.get(self.task_id)
        self.plan = solver(self.utterance) if solver else []
        return self.utterance

    async def outcome(self, session: BrowserSession, answer: str | None) -> Outcome:
        state = await session.evaluate(
            "() => window.__agentgymEpisode ? [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_REWARD_REASON] : null")
        if state is None:  # the agent navigated away or reloaded: the MiniWoB episode is lost
            return Outcome(done=True, reward=-1.0, detail="left the MiniWoB task page (MiniWoB's failure reward)")
        done, raw, reason = state
        if not done:
            return Outcome(done=False, detail="MiniWoB episode running")
        return Outcome(done=True, reward=float(raw), success=float(raw) > 0, detail=f"MiniWoB: {reason or raw}")

    def solver_step(self, view: PageView, position: int) -> Step | None:
        return self.plan[position] if position < len(self.plan) else None


class MiniWobSuite:
    """The MiniWoB++ tasks of the installed package."""

    name = "miniwob"

    def __init__(self, tasks: tuple[str, ...] | None = None, max_time_s: float = 300.0):
        available = miniwob_tasks()
        unknown = sorted(set(tasks or ()) - set(available))
        if unknown:
            raise ConfigError(f"unknown MiniWoB++ task(s) {unknown}; the package ships {len(available)} "
                              f"(e.g. {available[:3]})")
        self._tasks = list(tasks) if tasks else available
        self._handler = static_handler(html_dir())
        self.max_time_s = max_time_s

    def task_ids(self) -> list[str]:
        return list(self._tasks)

    def difficulty(self, task_id: str) -> str:
        return "miniwob"

    def start(self, task_id: str, seed: int | None) -> MiniWobRun:
        return MiniWobRun(task_id, self._handler, self.max_time_s)


# ---- scripted solvers: utterance -> steps on elements named by role and name ----------------------------
def _quoted(utterance: str) -> list[str]:
    return re.findall(r'"([^"]*)"', utterance)


def _click_button(u: str) -> list[Step]:
    return [Step("click", "button", _quoted(u)[0])]


def _enter_text(u: str) -> list[Step]:
    return [Step("fill", "textbox", "", _quoted(u)[0]), Step("click", "button", "Submit")]


SOLVERS: dict[str, Callable[[str], list[Step]]] = {
    "click-test": lambda u: [Step("click", "button", "Click Me!")],
    "click-test-2": lambda u: [Step("click", "button", re.search(r"button (\w+)", u).group(1))],
    "click-button": _click_button,
    "click-link": lambda u: [Step("click", "text", _quoted(u)[0])],
    "click-tab": lambda u: [Step("click", "link", re.search(r"(Tab #\d+)", u).group(1))],
    "click-button-sequence": lambda u: [Step("click", "button", "ONE"), Step("click", "button", "TWO")],
    "focus-text": lambda u: [Step("click", "textbox", "")],
    "enter-text": _enter_text,
    "enter-password": lambda u: [Step("fill", "textbox", "", _quoted(u)[0], ), Step("fill", "textbox#2", "",
                                 _quoted(u)[0]), Step("click", "button", "Submit")],
    "login-user": lambda u: [Step("fill", "textbox", "", _quoted(u)[0]), Step("fill", "textbox#2", "", _quoted(u)[1]),
                             Step("click", "button", "Login")],
    "choose-list": lambda u: [Step("select", "combobox", "", re.search(r"Select (.+?) from", u).group(1)),
                              Step("click", "button", "Submit")],
    "click-option": lambda u: [Step("click", "radio", re.search(r"Select (.+?) and click", u).group(1)),
                               Step("click", "button", "Submit")],
    "click-checkboxes": lambda u: [Step("click", "checkbox", w) for w in _checkbox_words(u)]
    + [Step("click", "button", "Submit")],
    "click-dialog": lambda u: [Step("click", "button", "Close")],
}


def _checkbox_words(u: str) -> list[str]:
    match = re.search(r"Select (.*?) and click Submit", u)
    if not match or match.group(1).strip().lower() == "nothing":
        return []
    return [w.strip() for w in re.split(r",\s*", match.group(1)) if w.strip()]
