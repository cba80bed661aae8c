"""Run a task's tests inside a sandbox and read back one `TestOutcome` per test.

Python tests go through the stdlib runner of `runner_source` (sent with
``python3 -c``; the tests travel on stdin and never touch the sandbox's
disk). Command tests (repo tasks) are one shell command whose exit status
decides. Whatever the submitted code does (loops, crashes, floods of output,
killing the runner), every test gets an outcome; a sandbox that dies is
reported in `TestReport.runner_error` and marks the remaining tests.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from agentgym.envs.code.runner_source import RUNNER
from agentgym.envs.code.tasks import TestCase, TestOutcome, TestReport
from agentgym.sandboxes import ExecResult, Sandbox

RUNNER_SLACK_S = 10.0


@dataclass(frozen=True)
class Suite:
    """Tests of one solution module found in `directory` of the sandbox."""

    id: str
    tests: Sequence[TestCase]
    directory: str = "/work"
    module: str | None = "solution"
    setup: str = ""


def run_suites(sandbox: Sandbox, suites: Sequence[Suite], *, timeout_s: float,
               output_chars: int = 2000) -> tuple[dict[str, TestReport], ExecResult]:
    """Run every suite's tests in one exec; a report per suite id, and the runner's own exec result."""
    job = {"suites": [{"id": s.id, "dir": s.directory, "module": s.module, "setup": s.setup,
                       "tests": [{"name": t.name, "code": t.code} for t in s.tests]} for s in suites],
           "timeout_s": timeout_s, "output_chars": output_chars}
    total = sum(len(s.tests) for s in suites)
    result = sandbox.exec(["python3", "-I", "-B", "-c", RUNNER], stdin=json.dumps(job),
                          timeout=total * (timeout_s + 0.5) + RUNNER_SLACK_S)
    records: dict[tuple[str, int], dict] = {}
    for line in result.stdout.splitlines():
        try:
            record = json.loads(line)
            records[(str(record["suite"]), int(record["index"]))] = record
        except (ValueError, KeyError, TypeError):
            continue
    broke = None if len(records) == total else _runner_problem(result)
    reports = {}
    for suite in suites:
        outcomes = tuple(_outcome(t, records.get((suite.id, i)), broke) for i, t in enumerate(suite.tests))
        reports[suite.id] = TestReport(outcomes, broke)
    return reports, result


def run_command(sandbox: Sandbox, name: str, command: str, *, timeout_s: float,
                output_chars: int = 4000) -> tuple[TestReport, ExecResult]:
    """A shell test command as one test: passed when it exits 0."""
    result = sandbox.exec(command, timeout=timeout_s)
    output = (result.stdout + result.stderr)[-output_chars:]
    if result.sandbox_died:
        outcome = TestOutcome(name, "crash", result.error or "the sandbox died", output)
        return TestReport((outcome,), result.error), result
    if result.timed_out:
        status, error = "timeout", f"the test command ran past its timeout of {timeout_s:g}s and was killed"
    elif result.exit_code == 0:
        status, error = "passed", ""
    else:
        status, error = "wrong_answer", f"the test command exited with status {result.exit_code}"
    return TestReport((TestOutcome(name, status, error, output),)), result


def _outcome(test: TestCase, record: dict | None, broke: str | None) -> TestOutcome:
    if record is None:
        return TestOutcome(test.name, "crash", f"the test did not run: {broke}")
    status = record.get("status")
    if status not in ("passed", "wrong_answer", "crash", "timeout", "syntax"):
        status = "crash"
    return TestOutcome(test.name, status, str(record.get("error", "")), str(record.get("output", "")))


def _runner_problem(result: ExecResult) -> str:
    if result.sandbox_died:
        return f"the sandbox died while the tests ran: {result.error}"
    if result.timed_out:
        return "the test run as a whole ran past its time limit"
    if result.truncated:
        return "the test runner's report was cut at the sandbox's output cap"
    return f"the test runner stopped early (exit status {result.exit_code}): {result.stderr.strip()[-500:]}"
