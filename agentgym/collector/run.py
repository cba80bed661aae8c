"""`EpisodeRun`: the live state of one episode between turns.

It owns the three views of an episode that must stay in step:

- the `Episode` record (what the store and the trainer get),
- the chat messages (what text-level policies read),
- the token context (the exact ids the model has seen: every turn's
  ``prompt_ids`` then ``action_ids``, appended, never re-tokenized).

The collector drives it: `observe` adds an observation (building its prompt
ids from the chat template's append-only delta), `request` builds the next
`GenerationRequest`, `act` records a completion (or the continuation of an
aborted one), `answer` records the env's reply. A paused run (partial
rollout) keeps all of it and continues where it stopped.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from typing import Any

from agentgym.context_tokens import ChatFormat, check_episode
from agentgym.core import Message
from agentgym.policy.base import Completion, FinishReason, GenerationRequest, SamplingParams
from agentgym.trajectory import Episode, EpisodeStatus, Failure, Turn, step_ending


def stable_seed(*parts: object) -> int:
    """A 62-bit seed from `parts`, the same in every process."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 2


@dataclass
class EpisodeRun:
    """One episode in flight (or paused); see the module docstring."""

    episode: Episode
    env: Any = None  #: the live env (None before reset or after release)
    fmt: ChatFormat | None = None  #: chat template + tokenizer; None for text-only policies
    system_prompt: str = ""
    messages: list[Message] = field(default_factory=list)
    context: list[int] = field(default_factory=list)  #: every id the model has seen, in order
    observation: str = ""  #: the observation awaiting an action
    budget: int = 0  #: turns granted so far (turn control)
    started: bool = False  #: reset done
    finished: bool = False  #: complete, truncated or error; nothing left to do
    open_turn: Turn | None = None  #: a turn whose generation was aborted and will be continued
    stop_ids: frozenset[int] = frozenset()
    context_turns: int = 0  #: finished turns whose ids are in `context` (a window drops some)
    segment_start: int = 0  #: index of the turn whose prompt started the current context (0, or the last window)
    env_starts: int = 0  #: envs made for this episode (cost accounting)
    setup_s: float = 0.0  #: seconds making the env and resetting it (cost accounting)
    usage_start: tuple[float, float] | None = None  #: its env worker's (CPU s, peak MB) at reset (cost accounting)
    _cut: dict[str, Any] | None = None  #: the window applied to the next observed turn
    _window_user: Message | None = None  #: the windowed form of the next observation (marker included)

    @property
    def id(self) -> str:
        return self.episode.id

    # ---- observations -------------------------------------------------------
    def begin(self, observation: str, budget: int) -> None:
        """Start from the reset observation."""
        self.started, self.observation, self.budget = True, observation, budget
        if self.system_prompt:
            self.messages.append({"role": "system", "content": self.system_prompt})

    def prompt_delta(self) -> list[int] | None:
        """Ids to append so the model can answer `observation` (None in text mode)."""
        if self.fmt is None:
            return None
        user = {"role": "user", "content": self.observation}
        if not self.episode.turns:
            return self.fmt.prompt_ids([*self.messages, user])
        return self.fmt.observation_ids(self.messages[:-1], user, self.episode.turns[-1].action_ids)

    def observe(self, prompt_ids: list[int] | None, fingerprint: str) -> Turn:
        """Open the turn that answers `observation`, its prompt ids already checked against the context limit."""
        turn = Turn(index=len(self.episode.turns), observation=self.observation,
                    prompt_ids=list(prompt_ids or []), state_fingerprint=fingerprint)
        self.messages.append(self._window_user or {"role": "user", "content": self.observation})
        if prompt_ids:
            self.context.extend(prompt_ids)
        if self._cut is not None:
            turn.info["context"] = self._cut
            totals = self.episode.metadata.setdefault("context", {"windowed_turns": 0, "dropped_tokens": 0})
            totals["windowed_turns"] += 1
            totals["dropped_tokens"] += self._cut["dropped_tokens"]
            self.segment_start = turn.index
        self._cut = self._window_user = None
        self.episode.turns.append(turn)
        return turn

    def rewindow(self, windowed: Any) -> list[int]:
        """Replace the context by a windowed prompt (`agentgym.collector.window.Windowed`); returns its ids.

        The next `observe` records the ids as the turn's whole prompt, marked ``info["context"]["reset"]``.
        """
        self.context = []
        self.messages = list(windowed.messages[:-1])
        self._window_user = windowed.messages[-1]
        self.context_turns = sum(m["role"] == "assistant" for m in self.messages)
        self._cut = {"reset": True, "dropped_turns": windowed.dropped_turns, "dropped_tokens": windowed.dropped_tokens,
                     "prompt_tokens": len(windowed.ids)}
        return list(windowed.ids)

    # ---- actions --------------------------------------------------------------
    def request(self, sampling: SamplingParams, tools: list[dict[str, Any]] | None) -> GenerationRequest:
        """The request for the current turn (continuing an aborted generation when there is one)."""
        turn = self.episode.turns[-1]
        if self.open_turn is not None:
            sampling = sampling.replace(max_new_tokens=max(1, sampling.max_new_tokens - len(turn.action_ids)))
        if sampling.seed is not None:
            # the collector's key (task, seed, group ordinal, member) repeats in every run of one seed; the id does not
            key = self.episode.metadata.get("sample_key") or self.id
            sampling = sampling.replace(seed=stable_seed(sampling.seed, key, turn.index, len(turn.action_ids)))
        return GenerationRequest(episode_id=self.id, messages=list(self.messages),
                                 prompt_ids=list(self.context) if self.fmt is not None else None,
                                 sampling=sampling, tools=tools, env=self.env)

    def act(self, completion: Completion, seconds: float) -> Turn:
        """Record what the policy sampled for the current turn."""
        turn = self.episode.turns[-1]
        n = len(completion.token_ids)
        turn.action_ids.extend(completion.token_ids)
        turn.action_logprobs.extend(completion.logprobs or [0.0] * n)
        turn.token_versions.extend([completion.version] * n)
        turn.loss_mask = [*(turn.loss_mask or []), *([1] * n)]
        if self.fmt is not None:
            self.context.extend(completion.token_ids)
        if self.open_turn is not None and self.fmt is not None:
            body = turn.action_ids[:-1] if turn.action_ids and turn.action_ids[-1] in self.stop_ids else turn.action_ids
            turn.action_text = self.fmt.decode(body)
        else:
            turn.action_text += completion.text
        turn.finish_reason = str(completion.finish_reason)
        turn.timings["generate_s"] = turn.timings.get("generate_s", 0.0) + seconds
        turn.info.setdefault("policy", completion.source)
        self.open_turn = turn if completion.finish_reason == FinishReason.ABORT else None
        return turn

    def answer(self, observation: str, reward: float, terminated: bool, truncated: bool,
               info: dict[str, Any], seconds: float) -> None:
        """Record the env's reply to the current turn's action."""
        turn = self.episode.turns[-1]
        self.messages.append({"role": "assistant", "content": turn.action_text})
        self.context_turns += 1
        turn.reward, turn.terminated, turn.truncated = reward, terminated, truncated
        turn.info.update(info)
        turn.timings["env_s"] = seconds
        self.observation = observation
        if (ending := step_ending(terminated, truncated, info)) is not None:
            turn.info.setdefault("next_observation", observation)
            self.end(*ending)

    # ---- endings ----------------------------------------------------------------
    def end(self, status: EpisodeStatus, reason: str | None = None, failure: Failure | None = None) -> None:
        """Finish the episode with `status` (and whose fault, and why)."""
        self.finished = True
        self.open_turn = None
        self.episode.end(status, reason, failure, self.observation)

    def pause(self) -> None:
        """Mark the episode partial: unfinished, kept with everything it has, to be resumed."""
        self.episode.status = EpisodeStatus.PARTIAL
        self.episode.finish()

    def mask_earlier_tokens(self) -> None:
        """Loss mask 0 on every action token generated so far (stale tokens serve only as context)."""
        for turn in self.episode.turns:
            turn.loss_mask = [0] * len(turn.action_ids)

    def check_template(self) -> dict[str, Any] | None:
        """Compare the recorded ids with a fresh tokenization of the conversation (None in text mode)."""
        if self.fmt is None or not self.episode.turns:
            return None
        messages = list(self.messages)
        if len(messages) and messages[-1]["role"] == "user":
            messages.append({"role": "assistant", "content": self.episode.turns[-1].action_text})
        turns = self.episode.turns[self.segment_start:]  # a window starts a new context: check the current one
        result = check_episode(self.fmt, messages, [(t.prompt_ids, t.action_ids) for t in turns])
        return result.to_dict()

    # ---- branching ----------------------------------------------------------------
    def fork(self, turn: int, child: Episode) -> EpisodeRun:
        """A run that shares this episode's turns before `turn` exactly and resamples turn `turn`.

        Called on a run rebuilt from the parent's record (`from_record`); the
        child's env is attached by the caller.
        """
        parent = self.episode
        child.turns = copy.deepcopy(parent.turns[:turn])
        run = EpisodeRun(child, fmt=self.fmt, system_prompt=self.system_prompt, budget=self.budget,
                         started=True, stop_ids=self.stop_ids)
        if self.system_prompt:
            run.messages.append({"role": "system", "content": self.system_prompt})
        if self.fmt is not None and any(not t.prompt_ids for t in child.turns):
            run.tokenize_prefix()
        for t in child.turns:
            run.messages += [{"role": "user", "content": t.observation}, {"role": "assistant", "content": t.action_text}]
            if t.info.get("context", {}).get("reset"):
                run.context, run.segment_start = [], t.index
            run.context += [*t.prompt_ids, *t.action_ids]
        run.context_turns = len(child.turns)
        run.observation = parent.turns[turn].observation
        return run

    def tokenize_prefix(self) -> None:
        """Give copied turns recorded without ids (a text policy played them) the ids this model's template makes.

        The prompt ids are built as `observe` builds them; the action ids are the
        action text's tokens plus the end-of-turn token, with log-prob 0 and loss
        mask 0 (this model did not sample them), marked ``info["tokenized_prefix"]``.
        """
        assert self.fmt is not None
        messages = list(self.messages)
        previous: list[int] = []
        for t in self.episode.turns:
            user = {"role": "user", "content": t.observation}
            t.prompt_ids = (self.fmt.prompt_ids([*messages, user]) if t.index == 0
                            else self.fmt.observation_ids(messages[:-1], user, previous))
            eos = getattr(self.fmt.tokenizer, "eos_token_id", None)
            stop = [eos] if eos is not None else sorted(self.stop_ids)[:1]
            t.action_ids = self.fmt.encode(t.action_text) + stop
            t.action_logprobs, t.loss_mask = [0.0] * len(t.action_ids), [0] * len(t.action_ids)
            t.token_versions = [-1] * len(t.action_ids)
            t.info["tokenized_prefix"] = True
            messages += [user, {"role": "assistant", "content": t.action_text}]
            previous = t.action_ids
