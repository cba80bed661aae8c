"""Scripted policies (labelled as such) for the eval tests: a slow one and one whose first call breaks."""

from __future__ import annotations

import time

from tests.helpers.counter_env import scripted_up_to_target

_broken_once: set[str] = set()


def slow_solver(messages: list[dict]) -> str:
    """Moves towards the target, 0.15 s per action (so an eval can be killed mid-run)."""
    time.sleep(0.15)
    return scripted_up_to_target(messages)


def breaks_first_call_of_target_1(messages: list[dict]) -> str:
    """Raises (an infrastructure failure of the policy) on the very first action of task target-1, then solves."""
    if "target 1" in messages[-1]["content"] and "target-1" not in _broken_once:
        _broken_once.add("target-1")
        raise ConnectionError("policy server went away (scripted failure)")
    return scripted_up_to_target(messages)
