"""Run one episode of an env with a text-level policy and record it as an `Episode`.

This is the synchronous, one-episode-at-a-time path behind `agentgym rollout`
and `agentgym replay`. The concurrent, token-accurate path for training is
`agentgym.collector`.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from agentgym.core import AgentEnv, Message
from agentgym.policy.simple import ActionFn
from agentgym.trajectory import Episode, EpisodeStatus, Failure, Turn


def conversation(system_prompt: str, turns: list[Turn], observation: str) -> list[Message]:
    """The chat messages a policy sees before acting on `observation`."""
    messages: list[Message] = [{"role": "system", "content": system_prompt}] if system_prompt else []
    for turn in turns:
        messages.append({"role": "user", "content": turn.observation})
        messages.append({"role": "assistant", "content": turn.action_text})
    messages.append({"role": "user", "content": observation})
    return messages


def _fingerprint(env: Any) -> str:
    inner = env.unwrapped
    return inner.state_fingerprint() if isinstance(inner, AgentEnv) else ""


def run_episode(
    env: Any,
    policy: ActionFn,
    *,
    env_id: str = "",
    task_id: str | None = None,
    seed: int | None = None,
    max_turns: int = 30,
    run_id: str = "",
    group_id: str = "",
) -> Episode:
    """Roll out one episode; env or policy exceptions become an `error` episode, never a crash."""
    episode = Episode(run_id=run_id, env_id=env_id, task_id=task_id or "", seed=seed, group_id=group_id)
    system_prompt = getattr(env.unwrapped, "system_prompt", "")
    try:
        options = {"task_id": task_id} if task_id is not None else None
        observation, info = env.reset(seed=seed, options=options)
        episode.task_id = str(info.get("task_id", task_id or ""))
    except Exception as exc:
        return _failed(episode, f"env.reset raised {exc!r}", Failure.INFRA)
    for index in range(max_turns):
        turn = Turn(index=index, observation=observation, state_fingerprint=_fingerprint(env))
        episode.turns.append(turn)
        started = time.perf_counter()
        try:
            turn.action_text = policy(conversation(system_prompt, episode.turns[:-1], observation), env)
        except Exception as exc:
            return _failed(episode, f"policy raised {exc!r}", Failure.INFRA)
        generated = time.perf_counter()
        try:
            observation, reward, terminated, truncated, info = env.step(turn.action_text)
        except Exception as exc:
            tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
            return _failed(episode, f"env.step raised {tb}", Failure.INFRA)
        turn.reward, turn.terminated, turn.truncated = float(reward), bool(terminated), bool(truncated)
        turn.info = dict(info)
        turn.timings = {"generate_s": generated - started, "env_s": time.perf_counter() - generated}
        if terminated or truncated:
            turn.info.setdefault("next_observation", observation)
            if truncated:
                episode.status = EpisodeStatus.TRUNCATED
                episode.error = str(info.get("truncation_reason", "truncated by the env"))
            return episode.finish()
    episode.status, episode.failure = EpisodeStatus.TRUNCATED, Failure.MODEL
    episode.error = f"turn limit of {max_turns} reached"
    episode.turns[-1].truncated = True
    episode.turns[-1].info.setdefault("next_observation", observation)
    return episode.finish()


def _failed(episode: Episode, reason: str, failure: Failure) -> Episode:
    episode.status, episode.failure, episode.error = EpisodeStatus.ERROR, failure, reason
    if episode.turns and not episode.turns[-1].action_text and not episode.turns[-1].info:
        episode.turns[-1].info = {"error": reason}
    return episode.finish()
