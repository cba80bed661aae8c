"""Scripted and simulated backends: Python callables as policies, for tests, benchmarks and env debugging.

`ScriptedBackend` wraps a function from the conversation to the action text::

    def always_up(messages):            # or (messages, env) to read the live env
        return "up"

    collector = Collector("Maze-v0", ScriptedBackend(always_up), store)

With a tokenizer, the text is tokenized (plus the end-of-turn token) so the
collector's token accounting runs exactly as with a model; the log-probs are
0.0 (the script is deterministic). Completions are labelled ``scripted``.

`SimulatedBackend` is a labelled *simulation* of a model's timing: each turn it
"generates" a number of tokens drawn from a distribution (long-tailed, say)
at a fixed time per token, can be aborted mid-turn (keeping the tokens so
far, as a real engine does) and continued later. The benchmark of partial
rollouts and the partial-rollout tests use it.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from agentgym.core import Message
from agentgym.errors import ConfigError
from agentgym.policy.base import Backend, BackendError, Completion, FinishReason, GenerationRequest

#: messages -> text, or (messages, env) -> text; may be async
TextFn = Callable[..., Any]


def _adapt(fn: TextFn) -> Callable[[list[Message], Any], Any]:
    if not callable(fn):
        raise ConfigError(f"a scripted policy must be callable (messages -> text), got {type(fn).__name__}")
    try:
        takes_env = len(inspect.signature(fn).parameters) >= 2
    except (TypeError, ValueError):
        takes_env = False
    return (lambda m, env: fn(m, env)) if takes_env else (lambda m, env: fn(m))


async def _call_text(fn: Callable[[list[Message], Any], Any], request: GenerationRequest) -> str:
    text = fn(request.messages, request.env)
    if inspect.isawaitable(text):
        text = await text
    if not isinstance(text, str):
        raise BackendError(f"scripted policy returned {type(text).__name__} for episode {request.episode_id}, "
                           "expected the action text (str)")
    return text


class ScriptedBackend(Backend):
    """A text function as a backend (see the module docstring)."""

    name = "scripted"
    logprob_convention = "scripted: log-prob 0 for every token (a deterministic script)"

    def __init__(self, fn: TextFn, tokenizer: Any = None):
        super().__init__()
        self._fn = _adapt(fn)
        self.tokenizer = tokenizer
        self.stop_ids = frozenset([tokenizer.eos_token_id]) if tokenizer is not None else frozenset()

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        return [await self._one(r) for r in requests]

    async def _one(self, request: GenerationRequest) -> Completion:
        text = await _call_text(self._fn, request)
        ids: list[int] = []
        if self.tokenizer is not None:
            ids = list(self.tokenizer.encode(text, add_special_tokens=False)) + [self.tokenizer.eos_token_id]
        return Completion(episode_id=request.episode_id, token_ids=ids, logprobs=[0.0] * len(ids), text=text,
                          finish_reason=FinishReason.STOP, version=self.version,
                          prompt_tokens=len(request.prompt_ids or ()), source=self.name)

    def update_weights(self, weights: Any, *, version: int | None = None) -> int:
        """Scripts have no weights; the version still moves so version bookkeeping can be tested."""
        return self._bump_version(version)


@dataclass
class _Turn:
    remaining: int  #: tokens left to "generate" for the current turn
    generated: int = 0


class SimulatedBackend(Backend):
    """A labelled simulation of generation time: `length(rng)` tokens per turn at `token_seconds` each.

    The action text comes from `act` (messages -> text) once the turn's
    tokens are all generated. Token ids are synthetic (``0..n-1``) with
    log-prob 0. `abort` ends in-flight turns early; the next request of the
    same episode continues the turn where it stopped.
    """

    name = "simulated"
    logprob_convention = "simulated: synthetic ids, log-prob 0"

    def __init__(self, act: TextFn, length: Callable[[random.Random], int], *, token_seconds: float = 1e-4,
                 seed: int = 0):
        super().__init__()
        self._act = _adapt(act)
        self._length = length
        self.token_seconds = token_seconds
        self._rng = random.Random(seed)
        self._turns: dict[str, _Turn] = {}
        self._aborted: set[str] = set()
        self._all_aborted = 0.0
        self.generated_tokens = 0

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    async def _one(self, request: GenerationRequest) -> Completion:
        started = time.monotonic()
        turn = self._turns.setdefault(request.episode_id, _Turn(max(1, int(self._length(self._rng)))))
        self._aborted.discard(request.episode_id)
        want = min(turn.remaining, request.sampling.max_new_tokens)
        made = 0
        while made < want:
            if request.episode_id in self._aborted or self._all_aborted > started:
                return self._emit(request, turn, made, FinishReason.ABORT, "")
            chunk = min(16, want - made)
            await asyncio.sleep(chunk * self.token_seconds)
            made += chunk
        reason = FinishReason.LENGTH if made < turn.remaining else FinishReason.STOP
        del self._turns[request.episode_id]
        return self._emit(request, turn, made, reason, await _call_text(self._act, request))

    def _emit(self, request: GenerationRequest, turn: _Turn, made: int, reason: FinishReason, text: str) -> Completion:
        ids = list(range(turn.generated, turn.generated + made))
        turn.generated += made
        turn.remaining -= made
        self.generated_tokens += made
        return Completion(episode_id=request.episode_id, token_ids=ids, logprobs=[0.0] * made, text=text,
                          finish_reason=reason, version=self.version, source=self.name)

    def abort(self, episode_ids: Iterable[str] | None = None) -> None:
        if episode_ids is None:
            self._all_aborted = time.monotonic()
        else:
            self._aborted.update(episode_ids)

    def release(self, episode_id: str) -> None:
        self._turns.pop(episode_id, None)
        self._aborted.discard(episode_id)

    def update_weights(self, weights: Any, *, version: int | None = None) -> int:
        """No weights; bumps the version (tokens after it carry the new one)."""
        return self._bump_version(version)
