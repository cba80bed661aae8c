"""Long-horizon context: keep the last N turns, or a prompt-token budget, and say what was cut.

Without a window the collector's context only grows: every turn appends the
sampled ids and the next observation, so a 40-turn episode eventually outgrows
the model. `ContextWindow` bounds it. Before a turn, when the context would hold
more than `keep_turns` earlier turns or more than `max_prompt_tokens` tokens,
the prompt is rendered afresh from

- the system prompt and the task (turn 0's observation and the reply to it), always kept;
- a visible elision marker, ``[... 5 earlier turns omitted ...]``, at the head of the
  first kept observation;
- the most recent earlier turns that fit (at most `keep_turns`, within the token budget);
- the new observation.

That turn's ``prompt_ids`` then hold the whole rendered prompt, exactly what the
model saw, and ``turn.info["context"]`` records the cut (``reset``, turns and
prompt tokens dropped). The trainer starts a new attention segment at such a
turn (`agentgym.trainer.packing`), so training reads exactly the stored tokens in
exactly the context the model had. Nothing is cut silently: the counts go to the
episode's ``metadata["context"]``, the eval table and the viewer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentgym.core import Message
from agentgym.errors import ConfigError
from agentgym.trajectory import Turn

MARKER = "[... {n} earlier turns omitted ...]"


@dataclass(frozen=True)
class ContextWindow:
    """How much history a prompt keeps; None fields do not limit."""

    keep_turns: int | None = None  #: earlier turns kept besides the task turn
    max_prompt_tokens: int | None = None  #: prompt budget in tokens (the system prompt and task always fit)
    marker: str = MARKER  #: the elision marker; ``{n}`` is the number of omitted turns

    def __post_init__(self) -> None:
        if self.keep_turns is not None and self.keep_turns < 0:
            raise ConfigError(f"keep_turns must be >= 0 earlier turns, got {self.keep_turns}")
        if self.max_prompt_tokens is not None and self.max_prompt_tokens < 1:
            raise ConfigError(f"max_prompt_tokens must be >= 1, got {self.max_prompt_tokens}")

    @property
    def active(self) -> bool:
        return self.keep_turns is not None or self.max_prompt_tokens is not None

    def needed(self, turns_in_context: int, prompt_tokens: int) -> bool:
        """Does a context of `turns_in_context` earlier turns and `prompt_tokens` tokens break the window?"""
        return ((self.keep_turns is not None and turns_in_context > self.keep_turns + 1)
                or (self.max_prompt_tokens is not None and prompt_tokens > self.max_prompt_tokens))


def context_settings(keep_turns: int | None = None, max_prompt_tokens: int | None = None,
                     episode_token_budget: int | None = None) -> dict[str, Any]:
    """Collector keyword arguments of the long-horizon settings (the window, the episode's token budget).

    One reading for every caller (`agentgym rollout` and `eval` flags, a stored eval plan, a training
    run), so the same settings give the same collector everywhere; unset settings are left out.
    """
    out: dict[str, Any] = {}
    if keep_turns is not None or max_prompt_tokens is not None:
        out["context_window"] = ContextWindow(keep_turns=keep_turns, max_prompt_tokens=max_prompt_tokens)
    if episode_token_budget is not None:
        out["episode_token_budget"] = episode_token_budget
    return out


@dataclass
class Windowed:
    """A freshly rendered, windowed prompt."""

    ids: list[int]
    messages: list[Message]  #: the conversation the model sees (ending with the new observation)
    dropped_turns: int  #: earlier turns left out
    dropped_tokens: int  #: prompt tokens fewer than the unwindowed context would have had


def render_window(fmt: Any, system: str, turns: list[Turn], observation: str, window: ContextWindow,
                  full_tokens: int) -> Windowed:
    """The windowed prompt for answering `observation` after `turns` (see the module docstring)."""
    head: list[Message] = [{"role": "system", "content": system}] if system else []
    if turns:
        head += [{"role": "user", "content": turns[0].observation},
                 {"role": "assistant", "content": turns[0].action_text}]
    earlier = turns[1:]
    keep = len(earlier) if window.keep_turns is None else min(window.keep_turns, len(earlier))
    while True:
        messages = _messages(head, earlier, keep, observation, window.marker)
        ids = fmt.prompt_ids(messages)
        if window.max_prompt_tokens is None or len(ids) <= window.max_prompt_tokens or keep == 0:
            return Windowed(ids, messages, len(earlier) - keep, max(0, full_tokens - len(ids)))
        keep -= 1


def _messages(head: list[Message], earlier: list[Turn], keep: int, observation: str, marker: str) -> list[Message]:
    dropped = len(earlier) - keep
    note = marker.format(n=dropped) + "\n" if dropped else ""
    body: list[Message] = []
    for turn in earlier[len(earlier) - keep:]:
        body += [{"role": "user", "content": note + turn.observation}, {"role": "assistant", "content": turn.action_text}]
        note = ""
    return [*head, *body, {"role": "user", "content": note + observation}]
