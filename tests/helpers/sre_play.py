"""Helpers for driving SRE-v0 in tests: tool-call actions and playing the built-in solver."""

from __future__ import annotations

import json

import agentgym


def tool(name: str, **arguments: object) -> str:
    """A tool-call action."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def solve(env: agentgym.AgentEnv, limit: int = 15) -> tuple[float, dict]:
    """Play the built-in solver to the end; (final reward, final info)."""
    inner = env.unwrapped
    for _ in range(limit):
        _, reward, terminated, truncated, info = env.step(inner.solver_action())
        if terminated or truncated:
            return float(reward), info
    raise AssertionError(f"the solver did not finish within {limit} turns")
