"""Token accounting for multi-turn episodes, and the chat-template append-only check.

The collector builds each episode's context *incrementally*: turn 0's prompt is
the chat template rendered for the first messages; every later turn appends
the ids the model sampled (exactly as sampled) and then the template's glue
for the new observation (`ChatFormat.observation_ids`): the end-of-message
tokens the model did not sample itself, the new user message and the next
generation prompt. Nothing already in the context is re-tokenized, so the
recorded ids are exactly what the model saw, and a backend with a KV cache
encodes each of them once.

A chat template that is *not* append-only (one that drops earlier reasoning
blocks, trims or rewrites earlier turns) renders the final conversation
differently from the context the model saw turn by turn. Training on the
re-rendered conversation then trains on tokens the model never saw, with
log-probs that do not belong to them. `check_episode` detects it: it compares
the ids recorded turn by turn with a fresh tokenization of the final
conversation, reports the first differing turn, and says which documented
template rewrite explains the difference. agentgym always trains on the ids as
sampled (`TRAIN_ON`), and the check result is stored with the episode.

    agentgym tokens check MODEL_DIR     # runs `check_template` on a model's template
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from agentgym.core import Message

#: What the collector trains on when the template is not append-only: the ids the model saw, as sampled.
TRAIN_ON = "as_sampled"

_SENTINEL = "\u2063AGENTGYM-ACTION\u2063"
_THINK = re.compile(r"<think>.*?</think>\s*", re.DOTALL)


def _drop_reasoning(text: str) -> str:
    return _THINK.sub("", text)


def _no_whitespace(text: str) -> str:
    return "".join(text.split())


#: Template rewrites that are known and documented (name -> text normaliser under which they vanish).
DOCUMENTED_REWRITES: dict[str, Callable[[str], str]] = {
    "drop_earlier_reasoning": _drop_reasoning,  # Qwen3/DeepSeek-R1 style: <think> blocks of earlier turns removed
    "trim_whitespace": _no_whitespace,  # templates that `| trim` message contents
}


class ChatFormat:
    """A tokenizer's chat template, seen as a sequence of append-only token deltas.

    `tools` are the env's OpenAI tool schemas; templates that support tools
    render them into the system part of the first prompt.
    """

    def __init__(self, tokenizer: Any, tools: Sequence[dict[str, Any]] | None = None):
        if getattr(tokenizer, "chat_template", None) is None:
            raise ValueError(
                f"tokenizer {getattr(tokenizer, 'name_or_path', tokenizer)!r} has no chat template; set "
                "tokenizer.chat_template (a Jinja string) or use an instruct model's tokenizer"
            )
        self.tokenizer = tokenizer
        self.tools = list(tools) if tools else None
        self.special_ids = frozenset(getattr(tokenizer, "all_special_ids", []) or [])

    def render(self, messages: Sequence[Message], *, add_generation_prompt: bool) -> str:
        """The template's text for `messages`."""
        return self.tokenizer.apply_chat_template(
            list(messages), tools=self.tools, tokenize=False, add_generation_prompt=add_generation_prompt)

    def encode(self, text: str) -> list[int]:
        """Ids of `text` as the template's text is tokenized (no extra BOS: the template writes its own)."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`, special tokens kept."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=False, clean_up_tokenization_spaces=False)

    def prompt_ids(self, messages: Sequence[Message]) -> list[int]:
        """The first prompt: the rendered messages plus the generation prompt."""
        return self.encode(self.render(messages, add_generation_prompt=True))

    def observation_ids(self, history: Sequence[Message], observation: Message,
                        action_ids: Sequence[int]) -> list[int]:
        """The ids to append after the sampled `action_ids` so that the model can answer `observation`.

        `history` is the conversation up to and including the user message the
        action answered. The template's text after an assistant message's
        content (its end-of-message marker), the new message and the
        generation prompt are rendered around a sentinel action, so the
        model's own text is never re-rendered; end-of-turn special tokens the
        model already sampled are not appended twice.
        """
        text = self.render([*history, {"role": "assistant", "content": _SENTINEL}, observation],
                           add_generation_prompt=True)
        at = text.find(_SENTINEL)
        if at < 0:
            raise ValueError("the chat template dropped the assistant message; it cannot be used for multi-turn episodes")
        delta = self.encode(text[at + len(_SENTINEL):])
        return delta[self._overlap(action_ids, delta):]

    def _overlap(self, action_ids: Sequence[int], delta: Sequence[int]) -> int:
        """How many trailing special tokens of the action the delta starts with."""
        for k in range(min(len(action_ids), len(delta), 4), 0, -1):
            tail = list(action_ids[-k:])
            if tail == list(delta[:k]) and all(t in self.special_ids for t in tail):
                return k
        return 0


@dataclass
class TemplateCheck:
    """Result of comparing recorded ids with a fresh tokenization of the final conversation."""

    append_only: bool  #: recorded ids == fresh ids (as far as the recorded ids go)
    first_diff_turn: int | None = None  #: the first turn whose ids differ
    first_diff_part: str | None = None  #: "prompt" (observation/template glue) or "action" (sampled ids)
    position: int | None = None  #: index of the first differing id in the concatenated sequence
    kind: str | None = None  #: "template_rewrite" (the text differs) or "retokenization" (same text, other ids)
    explained_by: str | None = None  #: the documented rewrite that explains a template_rewrite
    recorded: str = ""  #: recorded text around the difference
    fresh: str = ""  #: freshly rendered text around the difference
    train_on: str = TRAIN_ON  #: which ids the collector trains on
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One paragraph for people."""
        if self.append_only:
            return "append-only: the ids recorded turn by turn equal a fresh tokenization of the final conversation"
        what = ("the template rewrites earlier turns" if self.kind == "template_rewrite"
                else "the sampled ids are not the tokenizer's own tokenization of the sampled text")
        why = f" (documented rewrite: {self.explained_by})" if self.explained_by else ""
        return (f"not append-only: first difference in turn {self.first_diff_turn} ({self.first_diff_part} ids, "
                f"position {self.position}): {what}{why}. recorded {self.recorded!r} vs fresh {self.fresh!r}. "
                f"Training uses the ids {self.train_on.replace('_', ' ')}.")


def check_episode(fmt: ChatFormat, messages: Sequence[Message],
                  turns: Sequence[tuple[Sequence[int], Sequence[int]]]) -> TemplateCheck:
    """Compare ids recorded turn by turn with a fresh tokenization of the final conversation.

    `messages` is the final conversation (system, then user/assistant pairs),
    `turns` the recorded ``(prompt_ids, action_ids)`` of each turn in order.
    """
    spans: list[tuple[int, str, int, int]] = []
    recorded: list[int] = []
    for index, (prompt, action) in enumerate(turns):
        for part, ids in (("prompt", prompt), ("action", action)):
            spans.append((index, part, len(recorded), len(recorded) + len(ids)))
            recorded.extend(ids)
    fresh_text = fmt.render(messages, add_generation_prompt=False)
    fresh = fmt.encode(fresh_text)
    position = next((i for i, (a, b) in enumerate(zip(recorded, fresh, strict=False)) if a != b), None)
    if position is None and len(recorded) > len(fresh):
        position = len(fresh)
    if position is None:
        return TemplateCheck(append_only=True)
    turn, part = next((t, p) for t, p, start, end in spans if start <= position < end)
    recorded_text = fmt.decode(recorded)
    text_equal = fresh_text.startswith(recorded_text)
    result = TemplateCheck(
        append_only=False, first_diff_turn=turn, first_diff_part=part, position=position,
        kind="retokenization" if text_equal else "template_rewrite",
        recorded=fmt.decode(recorded[max(0, position - 4):position + 8]),
        fresh=fmt.decode(fresh[max(0, position - 4):position + 8]))
    if not text_equal:
        result.explained_by = next((name for name, norm in DOCUMENTED_REWRITES.items()
                                    if norm(fresh_text).startswith(norm(recorded_text))), None)
    return result


@dataclass
class SyntheticTurn:
    """One scripted turn of `check_template`'s conversation."""

    observation: str
    action: str


DEFAULT_CONVERSATION: tuple[SyntheticTurn, ...] = (
    SyntheticTurn("Start. Goal: 2 up, 1 left. Open: up, left.", "up"),
    SyntheticTurn("Moved up. Goal: 1 up, 1 left. Open: up, left.",
                  "<think>The goal is up and left; go left first.</think>left"),
    SyntheticTurn("Moved left. Goal: 1 up. Open: up, down.",
                  '<tool_call>{"name": "move", "arguments": {"direction": "up"}}</tool_call>'),
    SyntheticTurn("Goal reached!", "done"),
)


def simulate_episode(fmt: ChatFormat, system_prompt: str, script: Sequence[SyntheticTurn],
                     eos_id: int | None) -> tuple[list[Message], list[tuple[list[int], list[int]]]]:
    """Record `script` turn by turn as the collector does; actions are tokenized and end with `eos_id`."""
    messages: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    turns: list[tuple[list[int], list[int]]] = []
    last_action: list[int] = []
    for i, step in enumerate(script):
        observation = {"role": "user", "content": step.observation}
        prompt = (fmt.prompt_ids([*messages, observation]) if i == 0
                  else fmt.observation_ids(messages, observation, last_action))
        messages.append(observation)
        last_action = fmt.encode(step.action) + ([eos_id] if eos_id is not None else [])
        turns.append((prompt, last_action))
        messages.append({"role": "assistant", "content": step.action})
    return messages, turns


def check_template(tokenizer: Any, *, tools: Sequence[dict[str, Any]] | None = None,
                   system_prompt: str = "You walk through a maze to its goal.",
                   script: Sequence[SyntheticTurn] = DEFAULT_CONVERSATION) -> TemplateCheck:
    """Run `check_episode` on a scripted multi-turn conversation (with reasoning and a tool call)."""
    fmt = ChatFormat(tokenizer, tools)
    messages, turns = simulate_episode(fmt, system_prompt, script, tokenizer.eos_token_id)
    return check_episode(fmt, messages, turns)
