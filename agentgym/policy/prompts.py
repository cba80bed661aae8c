"""Prompt rendering choices of a run (policy loading, the collector and the trainer share them).

`WithoutTools` wraps a tokenizer so that its chat template never renders tool
schemas: for small models on envs whose system prompt already says what to
reply, the schemas only make every sequence longer. The collector renders
prompts with it (the SFT demonstrations and RL rollouts alike), so the model
sees one consistent format; the recorded ids are still exactly what it saw.
"""

from __future__ import annotations

from typing import Any


class WithoutTools:
    """A tokenizer proxy whose `apply_chat_template` ignores `tools`; everything else is delegated."""

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer

    def apply_chat_template(self, conversation: Any, *args: Any, tools: Any = None, **kwargs: Any) -> Any:
        return self._tokenizer.apply_chat_template(conversation, *args, tools=None, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)

    def __len__(self) -> int:
        return len(self._tokenizer)


def prompt_tokenizer(tokenizer: Any, chat_tools: bool) -> Any:
    """The tokenizer the collector renders prompts with."""
    return tokenizer if chat_tools else WithoutTools(tokenizer)
