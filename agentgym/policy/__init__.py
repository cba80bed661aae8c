"""Policies: what turns a conversation into the next action.

`simple` holds the text-level policies used for demonstrations, tests and env
debugging (`random`, `solver`, `scripted:MODULE:FUNC`).
"""

from agentgym.policy.simple import ActionFn, resolve_policy

__all__ = ["ActionFn", "resolve_policy"]
