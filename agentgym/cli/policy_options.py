"""The policy flags shared by `rollout`, `replay --from-turn` and `eval`: one grammar, one set of flags.

A command takes them through `with_policy_flags`, which adds the flags to its signature (so typer
shows them in `--help`) and hands them to the command as one `flags: PolicyFlags` argument.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import typer

from agentgym.policy.loading import PolicyOptions
from agentgym.policy.spec import GRAMMAR

POLICY_HELP = f"Policy spec: {GRAMMAR}."

#: the sampling flags: name -> (annotation, typer option)
SAMPLING_FLAGS: dict[str, tuple[type, Any]] = {
    "temperature": (float, typer.Option(1.0, "--temperature", min=0.0,
                                        help="Sampling temperature of model policies (0: greedy).")),
    "top_p": (float, typer.Option(1.0, "--top-p", min=0.0, max=1.0, help="Nucleus sampling mass of model policies.")),
    "max_new_tokens": (int, typer.Option(None, "--max-new-tokens", min=1,
                                         help="Per-turn generation cap of model policies (default: the run's, "
                                              "else 256).")),
    "chat_tools": (bool, typer.Option(None, "--chat-tools/--no-chat-tools",
                                      help="Render the env's tool schemas into model prompts (default: the run's, "
                                           "else yes).")),
    "tokenizer": (str, typer.Option(None, "--tokenizer",
                                    help="openai: tokenizer directory for exact prompt ids (default: the served "
                                         "model's root).")),
}
#: the long-horizon context flags: name -> (annotation, typer option)
CONTEXT_FLAGS: dict[str, tuple[type, Any]] = {
    "keep_turns": (int, typer.Option(None, "--keep-turns", min=0,
                                     help="Context window: keep the task and the last N turns (an elision marker "
                                          "shows the cut).")),
    "max_prompt_tokens": (int, typer.Option(None, "--max-prompt-tokens", min=1,
                                            help="Context window: drop the oldest turns (never the task) past this "
                                                 "prompt size.")),
    "episode_token_budget": (int, typer.Option(None, "--episode-token-budget", min=1,
                                               help="Sampled tokens per episode (per turn: --max-new-tokens).")),
}


@dataclass(frozen=True)
class PolicyFlags:
    """The shared flags as given on the command line (None: not given)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int | None = None
    chat_tools: bool | None = None
    tokenizer: str | None = None
    keep_turns: int | None = None
    max_prompt_tokens: int | None = None
    episode_token_budget: int | None = None

    def options(self, seed: int) -> PolicyOptions:
        """The `PolicyOptions` of the sampling flags."""
        return PolicyOptions(seed=seed, **{name: getattr(self, name) for name in SAMPLING_FLAGS})

    def context(self) -> dict[str, int | None]:
        """The context flags by name (None where not given)."""
        return {name: getattr(self, name) for name in CONTEXT_FLAGS}

    def collector_settings(self) -> dict[str, Any]:
        """Collector keyword arguments of the context flags (empty when none is set)."""
        from agentgym.collector.window import context_settings

        return context_settings(**self.context())


def with_policy_flags(*, context: bool = True) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator of a typer command: add the sampling flags (and the context flags when `context`).

    The command declares a keyword `flags: PolicyFlags` instead of one parameter a flag; the flags
    keep their place at the end of its `--help`.
    """
    flags = {**SAMPLING_FLAGS, **(CONTEXT_FLAGS if context else {})}

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command)
        if "flags" not in signature.parameters:
            raise TypeError(f"{command.__name__} must take a `flags: PolicyFlags` keyword to use with_policy_flags")
        kept = [p for p in signature.parameters.values() if p.name != "flags"]
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=kind)
                 for name, (kind, option) in flags.items()]

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            given = {name: kwargs.pop(name) for name in flags if name in kwargs}
            return command(*args, flags=PolicyFlags(**given), **kwargs)

        wrapper.__signature__ = signature.replace(parameters=kept + added)  # type: ignore[attr-defined]
        return wrapper

    return decorate
