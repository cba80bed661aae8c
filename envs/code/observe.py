"""What the model sees after a command or a test run: terminal-like text, capped with a visible marker."""

from __future__ import annotations

import re

from agentgym.envs.code.tasks import TestReport
from agentgym.sandboxes import ExecResult

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
STATUS_WORDS = {"passed": "passed", "wrong_answer": "wrong answer", "crash": "crashed", "timeout": "timed out",
                "syntax": "syntax error"}


def clip(text: str, limit: int) -> str:
    """`text` without control characters, at most about `limit` characters: its head and tail around a marker."""
    text = _CONTROL.sub("\ufffd", text.replace("\r\n", "\n"))
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 2 // 3], text[-(limit // 3):]
    cut = len(text) - len(head) - len(tail)
    return f"{head}\n[... {cut:,} characters cut: output is capped at {limit:,} characters ...]\n{tail}"


def render_exec(command: str, result: ExecResult, limit: int) -> str:
    """``$ command``, then stdout and stderr as a terminal interleaves them (stdout first), then the exit status."""
    lines = [f"$ {clip(command, 500)}"]
    output = result.stdout + (("\n" if result.stdout and not result.stdout.endswith("\n") else "") + result.stderr)
    if output:
        lines.append(clip(output, limit).rstrip("\n"))
    if result.timed_out:
        lines.append(f"[killed: {result.error}]")
    elif result.oom_killed:
        lines.append("[killed: the command ran out of memory]")
    elif result.exit_code == 127 and result.error:
        lines.append(f"[{result.error}]")
    lines.append(f"[exit code {result.exit_code}]")
    return "\n".join(lines)


def render_report(report: TestReport, title: str, limit: int) -> str:
    """A pytest-like summary: counts, then each failure with its error and output."""
    total, passed = len(report.outcomes), report.passed
    kinds: dict[str, int] = {}
    for o in report.outcomes:
        if not o.passed:
            kinds[STATUS_WORDS[o.status]] = kinds.get(STATUS_WORDS[o.status], 0) + 1
    summary = f"Ran {total} {title}: {passed} passed" + "".join(f", {n} {k}" for k, n in kinds.items()) + "."
    parts = [summary]
    per_failure = max(200, limit // max(1, total - passed))
    for o in report.outcomes:
        if o.passed:
            continue
        block = f"FAILED {o.name} ({STATUS_WORDS[o.status]})\n{o.error.rstrip()}"
        if o.output.strip():
            block += f"\n--- output ---\n{o.output.rstrip()}"
        parts.append(clip(block, per_failure))
    if report.runner_error:
        parts.append(f"[the test run broke off: {report.runner_error}]")
    return clip("\n\n".join(parts), limit)
