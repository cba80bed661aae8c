"""The policy flags shared by `rollout`, `replay --from-turn` and `eval`: one grammar, one set of sampling flags."""

from __future__ import annotations

from typing import Any

import typer

from agentgym.policy.loading import PolicyOptions
from agentgym.policy.spec import GRAMMAR

POLICY_HELP = f"Policy spec: {GRAMMAR}."


def temperature_option(default: float = 1.0) -> Any:
    return typer.Option(default, "--temperature", min=0.0, help="Sampling temperature of model policies (0: greedy).")


TOP_P = typer.Option(1.0, "--top-p", min=0.0, max=1.0, help="Nucleus sampling mass of model policies.")
MAX_NEW_TOKENS = typer.Option(None, "--max-new-tokens", min=1,
                              help="Per-turn generation cap of model policies (default: the run's, else 256).")
CHAT_TOOLS = typer.Option(None, "--chat-tools/--no-chat-tools",
                          help="Render the env's tool schemas into model prompts (default: the run's, else yes).")
TOKENIZER = typer.Option(None, "--tokenizer",
                         help="openai: tokenizer directory for exact prompt ids (default: the served model's root).")
KEEP_TURNS = typer.Option(None, "--keep-turns", min=0,
                          help="Context window: keep the task and the last N turns (an elision marker shows the cut).")
MAX_PROMPT_TOKENS = typer.Option(None, "--max-prompt-tokens", min=1,
                                 help="Context window: drop the oldest turns (never the task) past this prompt size.")
EPISODE_TOKEN_BUDGET = typer.Option(None, "--episode-token-budget", min=1,
                                    help="Sampled tokens per episode (per turn: --max-new-tokens).")


def context_settings(keep_turns: int | None, max_prompt_tokens: int | None,
                     episode_token_budget: int | None) -> dict[str, Any]:
    """Collector keyword arguments of the context flags (empty when none is set)."""
    from agentgym.collector.window import ContextWindow

    out: dict[str, Any] = {}
    if keep_turns is not None or max_prompt_tokens is not None:
        out["context_window"] = ContextWindow(keep_turns=keep_turns, max_prompt_tokens=max_prompt_tokens)
    if episode_token_budget is not None:
        out["episode_token_budget"] = episode_token_budget
    return out


def policy_options(*, temperature: float, top_p: float, max_new_tokens: int | None, seed: int,
                   chat_tools: bool | None, tokenizer: str | None) -> PolicyOptions:
    """The `PolicyOptions` of the shared flags."""
    return PolicyOptions(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed,
                         chat_tools=chat_tools, tokenizer=tokenizer)
