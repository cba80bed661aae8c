"""Text-level policies: `random`, `solver` and `scripted:MODULE:FUNC`.

A scripted policy is a plain function from the conversation so far (a list of
chat messages, ``{"role": ..., "content": ...}``) to the action text::

    def always_up(messages: list[dict]) -> str:
        return "up"

These policies sample no tokens; they drive envs for demonstrations, tests and
debugging. Scripted policies are labelled as such wherever they are used.
"""

from __future__ import annotations

import inspect
import random
from collections.abc import Callable
from typing import Any

from agentgym.core import AgentEnv, Message
from agentgym.errors import ConfigError
from agentgym.importing import import_callable

#: (messages, env) -> action text
ActionFn = Callable[[list[Message], AgentEnv], str]


def random_policy(seed: int | None = None) -> ActionFn:
    """Uniform over the env's `valid_actions()`, or samples of its action space when it has none."""
    rng = random.Random(seed)

    def act(messages: list[Message], env: AgentEnv) -> str:
        actions = env.unwrapped.valid_actions() if isinstance(env.unwrapped, AgentEnv) else None
        if actions:
            return rng.choice(actions)
        env.action_space.seed(rng.randrange(2**31))
        return env.action_space.sample()

    return act


def solver_policy(messages: list[Message], env: AgentEnv) -> str:
    """The env's built-in optimal action."""
    inner = env.unwrapped
    if not isinstance(inner, AgentEnv) or not inner.has_solver:
        raise ConfigError(f"{type(inner).__name__} has no built-in solver; use --policy random or scripted:MODULE:FUNC")
    return inner.solver_action()


def load_scripted(target: str) -> ActionFn:
    """Import ``MODULE:FUNC`` and adapt it: FUNC(messages) or FUNC(messages, env) -> str."""
    func = import_callable(target, what="scripted policy")
    try:
        takes_env = len(inspect.signature(func).parameters) >= 2
    except (TypeError, ValueError):
        takes_env = False

    def act(messages: list[Message], env: AgentEnv) -> str:
        result: Any = func(messages, env) if takes_env else func(messages)
        if not isinstance(result, str):
            raise TypeError(f"scripted policy '{target}' returned {type(result).__name__}, expected str")
        return result

    return act


def resolve_policy(spec: str, *, seed: int | None = None) -> ActionFn:
    """A policy from its CLI spec: ``random``, ``solver`` or ``scripted:MODULE:FUNC``."""
    if spec == "random":
        return random_policy(seed)
    if spec == "solver":
        return solver_policy
    if spec.startswith("scripted:"):
        return load_scripted(spec[len("scripted:"):])
    raise ConfigError(f"unknown policy {spec!r}: use 'random', 'solver' or 'scripted:MODULE:FUNC'")
