"""The records of Code-v0: a task, its tests, and the outcome of running them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

DIFFICULTIES = ("easy", "medium", "hard")
SOLUTION_FILE = "solution.py"
VISIBLE_TEST_FILE = "test_visible.py"
#: Error kinds of a failed test, as reported in ``info["tests"][i]["status"]``.
TEST_STATUSES = ("passed", "wrong_answer", "crash", "timeout", "syntax")


@dataclass(frozen=True)
class TestCase:
    """One test: Python statements run in the namespace of the solution module (or a shell command)."""

    __test__ = False  # not a pytest class

    name: str
    code: str


@dataclass(frozen=True)
class CodeTask:
    """One Code-v0 task.

    A *function* task has a solution module (``module``, written to
    ``solution.py``) checked by Python `TestCase`s. A *repo* task has a whole
    folder of files and is checked by shell commands (``visible_command``,
    ``hidden_command``) whose exit status decides; its ``hidden_files`` are
    added only in the grading sandbox.
    """

    id: str
    statement: str
    difficulty: str
    source: str
    """Which task set it came from: builtin, humaneval, mbpp or repo."""
    files: dict[str, str] = field(default_factory=dict)
    """The starting files of the workspace (relative paths)."""
    reference: dict[str, str] = field(default_factory=dict)
    """Files that solve the task (the scripted solver writes them)."""
    visible: tuple[TestCase, ...] = ()
    hidden: tuple[TestCase, ...] = ()
    module: str | None = "solution"
    """The module the tests import (function tasks); None for repo tasks."""
    entry_point: str = ""
    setup: str = ""
    """Code run before every test (MBPP's ``test_setup_code``)."""
    hidden_files: dict[str, str] = field(default_factory=dict)
    visible_command: str | None = None
    hidden_command: str | None = None

    @property
    def is_repo(self) -> bool:
        return self.module is None

    @property
    def main_file(self) -> str:
        """Where a plain fenced code block is written."""
        return f"{self.module}.py" if self.module else next(iter(self.reference), SOLUTION_FILE)


@dataclass(frozen=True)
class TestOutcome:
    """How one test ended."""

    __test__ = False

    name: str
    status: str
    """One of `TEST_STATUSES`."""
    error: str = ""
    output: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def as_info(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "passed": self.passed, "error": self.error,
                "output": self.output}


@dataclass(frozen=True)
class TestReport:
    """The outcomes of one test run; `runner_error` is set when the run itself broke."""

    __test__ = False

    outcomes: tuple[TestOutcome, ...]
    runner_error: str | None = None

    @property
    def passed(self) -> int:
        return sum(o.passed for o in self.outcomes)

    @property
    def fraction(self) -> float:
        return self.passed / len(self.outcomes) if self.outcomes else 0.0

    @property
    def error_kind(self) -> str | None:
        """The first failure's kind (syntax, timeout, wrong_answer, crash), None when all passed."""
        return next((o.status for o in self.outcomes if not o.passed), None)
