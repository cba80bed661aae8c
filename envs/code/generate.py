"""Code-v0's shipped task set: every (family, parameter) pair of `families` made into a task.

Generation is deterministic (the inputs come from a generator seeded by the
family and parameter), needs no files and takes well under a second, so the
set is rebuilt on load rather than stored. Expected outputs come from running
the reference solution on the host: it is our own code, never a model's.
"""

from __future__ import annotations

import functools
import random
import zlib
from typing import Any

from agentgym.envs.code.families import FAMILIES, Args, Family
from agentgym.envs.code.tasks import SOLUTION_FILE, CodeTask, TestCase

VISIBLE_TESTS = 3
HIDDEN_TESTS = 10


def _call(function: str, args: Args) -> str:
    return f"{function}({', '.join(repr(a) for a in args)})"


def assertion(function: str, args: Args, expected: Any) -> str:
    """A test line whose failure message says what the call returned and what was expected."""
    call = _call(function, args)
    return (f"assert (got := {call}) == (expected := {expected!r}), "
            f"{call!r} + ' returned ' + repr(got) + ', expected ' + repr(expected)")


def _inputs(family: Family, param: Any, index: int) -> tuple[list[Args], list[Args]]:
    rng = random.Random(zlib.crc32(f"{family.name}/{index}".encode()))
    seen: list[Args] = []
    for _ in range(200):
        args = family.inputs(rng, param)
        if args not in seen:
            seen.append(args)
        if len(seen) >= VISIBLE_TESTS + HIDDEN_TESTS:
            break
    visible = seen[:VISIBLE_TESTS]
    hidden = seen[VISIBLE_TESTS:] + [a for a in family.edge_cases(param) if a not in seen]
    return visible, hidden


def make_task(family: Family, param: Any, index: int) -> CodeTask:
    """The task of one family parameter, with tests from the reference solution's outputs."""
    reference = family.reference(param)
    namespace: dict[str, Any] = {}
    exec(compile(reference, f"<reference {family.name}>", "exec"), namespace)
    function = namespace[family.function]
    visible, hidden = _inputs(family, param, index)

    def tests(prefix: str, inputs: list[Args]) -> tuple[TestCase, ...]:
        return tuple(TestCase(f"{prefix}_{i + 1}", assertion(family.function, a, function(*a)))
                     for i, a in enumerate(inputs))

    examples = "\n".join(f"    {_call(family.function, a)} == {function(*a)!r}" for a in visible)
    statement = (f"Write a Python function `{family.signature}` in {SOLUTION_FILE}.\n\n"
                 f"{family.statement(param)}\n\nExamples:\n{examples}")
    return CodeTask(
        id=f"{family.name}-{index:02d}", statement=statement, difficulty=family.difficulty, source="builtin",
        files={SOLUTION_FILE: f"def {family.signature}:\n    raise NotImplementedError\n"},
        reference={SOLUTION_FILE: reference}, visible=tests("test_visible", visible),
        hidden=tests("test_hidden", hidden), entry_point=family.function,
    )


@functools.cache
def builtin_tasks() -> tuple[CodeTask, ...]:
    """The whole generated set, in a fixed order (easy, medium, hard)."""
    return tuple(make_task(f, p, i) for f in FAMILIES for i, p in enumerate(f.params))
