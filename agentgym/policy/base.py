"""The rollout-backend interface: what the collector asks of a policy, and what it gets back.

Every backend (`hf`, `openai`, `vllm`, `scripted`) implements `Backend`::

    completions = await backend.generate([GenerationRequest(episode_id, messages, prompt_ids, sampling)])
    backend.update_weights(state_dict_or_path)     # bumps backend.version
    backend.release(episode_id)                    # frees per-episode state (KV cache)
    backend.abort(episode_ids)                     # in-flight generations return early, tokens kept

A request carries the conversation so far as chat messages *and*, when the
collector tokenizes, the full context as token ids (``prompt_ids``). Backends
that sample tokens use the ids (so what the model sees is exactly what the
collector records); text-level backends (scripted) use the messages. The `hf`
backend keeps each episode's KV cache and prefills only the ids past the
longest common prefix with what it has cached.

A `Completion` holds the sampled ids exactly as sampled, their behavior
log-probs, the decoded text, why generation stopped, and the policy version
that produced every token. Nothing downstream re-tokenizes text.

Log-prob convention (`LOGPROB_CONVENTION`): the log-probability of the sampled
token under the *temperature-scaled* softmax over the full vocabulary,
``log_softmax(logits / temperature)[token]``, before top-k/top-p truncation.
This is the quantity a trainer recomputes from its own logits (divide by the
same temperature), so importance ratios start at exactly 1 for an unchanged
policy. With ``temperature == 0`` (greedy) the log-prob is taken at
temperature 1. Backends that cannot follow the convention say so in
`Backend.logprob_convention`.

Trainer-facing contract: call ``update_weights(weights, version=None)`` (or
``await aupdate_weights(...)`` from async code; the `vllm` backend has only
the async form) with a
``state_dict`` (full or partial: missing keys keep their values, unknown keys
are an error) or a path to a checkpoint directory/file; the backend's
`version` becomes ``version`` or ``version + 1``. Tokens sampled after the
call carry the new version; per-episode caches computed with the old weights
are dropped, so the next turn re-encodes its context with the new weights.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agentgym.core import Message
from agentgym.errors import AgentGymError, ConfigError

LOGPROB_CONVENTION = "temperature_scaled"  #: log_softmax(logits / temperature) over the full vocabulary


class FinishReason(StrEnum):
    """Why a backend stopped generating for a request."""

    STOP = "stop"  #: an end-of-turn token or a stop string
    LENGTH = "length"  #: `max_new_tokens` or the model's context length reached
    ABORT = "abort"  #: `abort()` was called; the tokens so far are kept (partial rollouts)


class BackendError(AgentGymError):
    """A backend failed to serve a request (server gone, bad response, engine crashed).

    `transient` says whether retrying the same request may succeed; the
    collector records such failures as infrastructure failures, never as
    model failures.
    """

    def __init__(self, message: str, *, transient: bool = False):
        super().__init__(message)
        self.transient = transient


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one completion (validated on construction)."""

    temperature: float = 1.0  #: 0 means greedy
    top_p: float = 1.0  #: nucleus mass in (0, 1]; 1 disables
    top_k: int = 0  #: keep the k most likely tokens; 0 disables
    max_new_tokens: int = 256  #: generation budget of this request
    stop: tuple[str, ...] = ()  #: extra stop strings (the end-of-turn token always stops)
    seed: int | None = None  #: seed of this request's sampler; None draws from the backend's generator

    def __post_init__(self) -> None:
        if not (self.temperature >= 0 and math.isfinite(self.temperature)):
            raise ConfigError(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ConfigError(f"top_p must be in (0, 1], got {self.top_p}; use 1.0 to disable nucleus sampling")
        if self.top_k < 0:
            raise ConfigError(f"top_k must be >= 0, got {self.top_k}; use 0 to disable top-k")
        if self.max_new_tokens < 1:
            raise ConfigError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))

    def replace(self, **changes: Any) -> SamplingParams:
        """A copy with `changes` applied."""
        values = {name: getattr(self, name) for name in self.__dataclass_fields__}
        values.update(changes)
        return SamplingParams(**values)


@dataclass
class GenerationRequest:
    """One model call for one episode."""

    episode_id: str  #: key of the episode's per-episode state (KV cache) in the backend
    messages: list[Message] = field(default_factory=list)  #: the conversation so far, as chat messages
    prompt_ids: list[int] | None = None  #: the full context as token ids (None: backend tokenizes messages)
    sampling: SamplingParams = field(default_factory=SamplingParams)
    tools: list[dict[str, Any]] | None = None  #: OpenAI tool schemas (used when the backend renders messages)
    env: Any = None  #: the live env, only for text policies that read its state (random, solver); models ignore it


@dataclass
class Completion:
    """What a backend sampled for one request."""

    episode_id: str
    token_ids: list[int] = field(default_factory=list)  #: sampled ids, exactly as sampled
    logprobs: list[float] = field(default_factory=list)  #: behavior log-prob of each sampled id
    text: str = ""  #: the decoded sampled ids (stop strings included when generation ended on one)
    finish_reason: FinishReason = FinishReason.STOP
    version: int = 0  #: policy version that sampled every token of this completion
    prompt_tokens: int = 0  #: length of the context the tokens were sampled after
    prefilled_tokens: int = 0  #: context tokens the backend had to encode (the rest came from its cache)
    source: str = ""  #: backend name (scripted completions are labelled "scripted")

    def __post_init__(self) -> None:
        self.finish_reason = FinishReason(self.finish_reason)
        if self.logprobs and len(self.logprobs) != len(self.token_ids):
            raise BackendError(
                f"completion for episode {self.episode_id} has {len(self.token_ids)} tokens but "
                f"{len(self.logprobs)} log-probs; a backend must return one log-prob per sampled token"
            )


class Backend(abc.ABC):
    """A policy that samples token completions for batches of requests.

    Subclasses implement `generate`; the rest has working defaults. `tokenizer`
    is the Hugging Face tokenizer of the model (None for text-only backends);
    the collector uses it for chat templates and token accounting.
    """

    name: str = "backend"
    tokenizer: Any = None
    logprob_convention: str = LOGPROB_CONVENTION
    #: accept a lower policy version than the current one (set by `agentgym serve`, whose weights come from one
    #: trainer: a trainer resumed from its checkpoint sends that checkpoint's version, below the one it had pushed)
    rewind_versions: bool = False

    def __init__(self) -> None:
        self.version = 0

    @abc.abstractmethod
    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """One completion per request, in request order."""

    def update_weights(self, weights: Any, *, version: int | None = None) -> int:
        """Load new weights (a state dict or a checkpoint path) and return the new version."""
        raise BackendError(f"the {self.name} backend cannot load weights; restart it with the new checkpoint")

    async def aupdate_weights(self, weights: Any, *, version: int | None = None) -> int:
        """`update_weights` from async code (backends whose engine is async implement this one)."""
        import asyncio

        return await asyncio.to_thread(self.update_weights, weights, version=version)

    def _bump_version(self, version: int | None) -> int:
        if version is not None and version < self.version and not self.rewind_versions:
            raise ConfigError(f"policy version must not go backwards: at {self.version}, asked for {version}")
        self.version = self.version + 1 if version is None else version
        return self.version

    def release(self, episode_id: str) -> None:  # noqa: B027 (no-op default)
        """Free what the backend keeps for `episode_id` (no-op by default)."""

    def abort(self, episode_ids: Iterable[str] | None = None) -> None:  # noqa: B027 (no-op default)
        """Make in-flight generations of `episode_ids` (all when None) return now with finish_reason `abort`."""

    @property
    def max_context(self) -> int | None:
        """The model's context length in tokens, when known."""
        return None

    async def aclose(self) -> None:  # noqa: B027 (no-op default)
        """Release connections, engines and caches."""

    async def __aenter__(self) -> Backend:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
