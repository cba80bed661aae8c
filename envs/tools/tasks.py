"""Task sets of Tools-v0, each task with a verifiable answer and a scripted tool plan.

- ``lookup`` (42): one- to three-hop questions over the fictional knowledge base.
- ``arithmetic`` (30): expressions and word problems for the calculator.
- ``dates`` (30): date offsets, day counts and weekdays.
- ``timezones`` (12): time-zone conversion through the ``mcp-server-time`` MCP
  server (zones without daylight saving time, so the answer never depends on
  the date the task is run).

A plan is a list of tool calls whose string arguments may refer to earlier
results as ``{0}``, ``{1}``...; the answer is the last result passed through an
extractor. The built-in solver plays the plan and answers with what the tools
returned, so a 100% solver score also checks the tools.
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentgym.envs.tools import knowledge
from agentgym.envs.tools.builtin import format_number


@dataclass(frozen=True)
class PlanStep:
    tool: str
    arguments: dict[str, Any]

    def bind(self, results: list[str]) -> dict[str, Any]:
        """The arguments with ``{i}`` replaced by the i-th earlier result."""
        return {k: v.format(*results) if isinstance(v, str) else v for k, v in self.arguments.items()}


@dataclass(frozen=True)
class ToolTask:
    """A question, its answer (plus accepted aliases) and the plan that finds it."""

    id: str
    question: str
    answer: str
    plan: tuple[PlanStep, ...]
    category: str
    extractor: str = "text"  # how the answer is read from the last result; see EXTRACTORS
    aliases: tuple[str, ...] = field(default=())


def _mcp_time(text: str) -> str:
    """``HH:MM`` of the target datetime in mcp-server-time's convert_time JSON."""
    return str(json.loads(text)["target"]["datetime"])[11:16]


EXTRACTORS: dict[str, Callable[[str], str]] = {"text": lambda text: text.strip(), "mcp_time": _mcp_time}


def _step(tool: str, **arguments: Any) -> PlanStep:
    return PlanStep(tool, arguments)


def lookup_tasks() -> list[ToolTask]:
    tasks: list[ToolTask] = []

    def add(question: str, plan: list[PlanStep]) -> None:
        results: list[str] = []
        for step in plan:
            args = step.bind(results)
            results.append(knowledge.lookup(args["entity"], args["attribute"]))
        tasks.append(ToolTask(f"lookup-{len(tasks)}", question, results[-1], tuple(plan), "lookup"))

    for company in knowledge.COMPANIES:
        add(f"In what year was {company} founded?", [_step("kb_lookup", entity=company, attribute="founded")])
    for person in knowledge.PEOPLE:
        add(f"In which city is the headquarters of the company that {person} works for?",
            [_step("kb_lookup", entity=person, attribute="employer"),
             _step("kb_lookup", entity="{0}", attribute="headquarters")])
    for person in knowledge.PEOPLE:
        add(f"In which country was {person} born?",
            [_step("kb_lookup", entity=person, attribute="born_in"),
             _step("kb_lookup", entity="{0}", attribute="country")])
    for company in knowledge.COMPANIES:
        add(f"What currency is used in the country where {company} has its headquarters?",
            [_step("kb_lookup", entity=company, attribute="headquarters"),
             _step("kb_lookup", entity="{0}", attribute="country"),
             _step("kb_lookup", entity="{1}", attribute="currency")])
    for person, facts in knowledge.PEOPLE.items():
        if facts["role"] != "chief executive":
            add(f"Who is the chief executive of the company that {person} works for?",
                [_step("kb_lookup", entity=person, attribute="employer"),
                 _step("kb_lookup", entity="{0}", attribute="ceo")])
    return tasks


def arithmetic_tasks() -> list[ToolTask]:
    rng = random.Random("agentgym-tools-arithmetic-v1")
    forms: list[tuple[str, str, Callable[[int, int, int], int]]] = [
        ("What is {a} * {b} + {c}?", "{a} * {b} + {c}", lambda a, b, c: a * b + c),
        ("A warehouse holds {a} crates of {b} boxes each. After {c} boxes are shipped out, how many boxes are left?",
         "{a} * {b} - {c}", lambda a, b, c: a * b - c),
        ("A ticket costs {b} coins. How many coins do {a} tickets cost with a discount of {c} coins on the total?",
         "{a} * {b} - {c}", lambda a, b, c: a * b - c),
    ]
    tasks = []
    for i in range(30):
        question, expression, compute = forms[i % len(forms)]
        values = {"a": rng.randint(12, 99), "b": rng.randint(11, 97), "c": rng.randint(3, 500)}
        tasks.append(ToolTask(f"arithmetic-{i}", question.format(**values), str(compute(**values)),
                              (_step("calculate", expression=expression.format(**values)),), "arithmetic"))
    return tasks


def date_tasks() -> list[ToolTask]:
    rng = random.Random("agentgym-tools-dates-v1")

    def day() -> dt.date:
        return dt.date(2000, 1, 1) + dt.timedelta(days=rng.randint(0, 365 * 30))

    tasks: list[ToolTask] = []
    for _ in range(10):
        start, n = day(), rng.randint(5, 400)
        tasks.append(ToolTask(f"dates-{len(tasks)}", f"What date is {n} days after {start.isoformat()}? "
                              "Answer as YYYY-MM-DD.", (start + dt.timedelta(days=n)).isoformat(),
                              (_step("date_add", date=start.isoformat(), days=n),), "dates"))
    for _ in range(10):
        a, b = sorted((day(), day()))
        tasks.append(ToolTask(f"dates-{len(tasks)}", f"How many days are there from {a.isoformat()} to "
                              f"{b.isoformat()}?", str((b - a).days),
                              (_step("days_between", start=a.isoformat(), end=b.isoformat()),), "dates"))
    for _ in range(5):
        d = day()
        tasks.append(ToolTask(f"dates-{len(tasks)}", f"On which day of the week did {d.isoformat()} fall?",
                              d.strftime("%A"), (_step("weekday", date=d.isoformat()),), "dates"))
    for _ in range(5):
        d, n = day(), rng.randint(20, 200)
        tasks.append(ToolTask(f"dates-{len(tasks)}", f"Which day of the week is {n} days after {d.isoformat()}?",
                              (d + dt.timedelta(days=n)).strftime("%A"),
                              (_step("date_add", date=d.isoformat(), days=n), _step("weekday", date="{0}")), "dates"))
    return tasks


#: IANA zones without daylight saving time, and their UTC offsets in minutes.
FIXED_ZONES = {"Asia/Tokyo": 540, "Asia/Kolkata": 330, "Asia/Dubai": 240, "Asia/Singapore": 480,
               "Africa/Nairobi": 180, "America/Bogota": -300, "Asia/Kathmandu": 345, "Pacific/Honolulu": -600,
               "America/Phoenix": -420, "UTC": 0}


def timezone_tasks() -> list[ToolTask]:
    rng = random.Random("agentgym-tools-timezones-v1")
    zones, tasks = sorted(FIXED_ZONES), []
    for i in range(12):
        src, dst = rng.sample(zones, 2)
        hour, minute = rng.randint(0, 23), rng.choice((0, 15, 30, 45))
        total = (hour * 60 + minute - FIXED_ZONES[src] + FIXED_ZONES[dst]) % (24 * 60)
        answer = f"{total // 60:02d}:{total % 60:02d}"
        time = f"{hour:02d}:{minute:02d}"
        tasks.append(ToolTask(f"timezones-{i}", f"When it is {time} in {src}, what time is it in {dst}? "
                              "Answer as HH:MM on a 24-hour clock.", answer,
                              (_step("convert_time", source_timezone=src, time=time, target_timezone=dst),),
                              "timezones", extractor="mcp_time"))
    return tasks


TASK_SETS: dict[str, Callable[[], list[ToolTask]]] = {
    "lookup": lookup_tasks, "arithmetic": arithmetic_tasks, "dates": date_tasks, "timezones": timezone_tasks}
#: Task sets that need an MCP server, and the server that provides their tools.
NEEDS_SERVER = {"timezones": {"command": "mcp-server-time", "args": ["--local-timezone", "UTC"], "name": "time"}}

_TIME = re.compile(r"^(\d{1,2}):(\d{2})$")
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?$")


def normalise_answer(text: str) -> str:
    """Case, spacing, quotes, trailing punctuation, thousands separators, number and HH:MM forms ignored."""
    value = " ".join(str(text).strip().strip("\"'`").split()).rstrip(".!").lower()
    value = value.removeprefix("the ")
    if _NUMBER.match(value.replace(",", "")):
        return format_number(float(value.replace(",", "")))
    if m := _TIME.match(value):
        return f"{int(m.group(1)):02d}:{m.group(2)}"
    return value


def answer_matches(given: str, task: ToolTask) -> bool:
    wanted = {normalise_answer(a) for a in (task.answer, *task.aliases)}
    return normalise_answer(given) in wanted
