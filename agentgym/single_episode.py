"""Run one episode of an env with a text-level policy and record it as an `Episode`.

The synchronous, one-episode-at-a-time path: `run_episode` for tests, notebooks
and env debugging. The concurrent, token-accurate path (`agentgym rollout`,
training, replay and branching) is `agentgym.collector`; both type an episode's
ending the same way (`Episode.end`, `agentgym.trajectory.step_ending`).
"""

from __future__ import annotations

import time
import traceback
from typing import Any

from agentgym.core import AgentEnv
from agentgym.errors import ConfigError, EnvInfraError
from agentgym.policy.simple import ActionFn
from agentgym.registration import DEFAULT_MAX_TURNS
from agentgym.trajectory import Episode, EpisodeStatus, Failure, Turn, chat_messages, step_ending


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
    max_turns: int = DEFAULT_MAX_TURNS,
    run_id: str = "",
    group_id: str = "",
) -> Episode:
    """Roll out one episode; env or policy exceptions become an `error` episode, never a crash."""
    episode = Episode(run_id=run_id, env_id=env_id, task_id=task_id or "", seed=seed, group_id=group_id)
    try:
        options = {"task_id": task_id} if task_id is not None else None
        observation, info = env.reset(seed=seed, options=options)
        episode.task_id = str(info.get("task_id", task_id or ""))
    except EnvInfraError as exc:
        return _infra_truncated(episode, f"env.reset: {exc.reason}", exc.kind)
    except Exception as exc:
        return _failed(episode, f"env.reset raised {exc!r}")
    return _play(env, policy, episode, observation, max_turns)


def _play(env: Any, policy: ActionFn, episode: Episode, observation: str, max_turns: int) -> Episode:
    """Let `policy` play `episode` from `observation` until the env ends it or `max_turns` is reached.

    Endings are typed as the collector types them (`Episode.end`, `step_ending`). A `ConfigError`
    from the policy (e.g. `solver` on an env without one) propagates: it is the user's.
    """
    system_prompt = getattr(env.unwrapped, "system_prompt", "")
    for index in range(episode.num_turns, max_turns):
        turn = Turn(index=index, observation=observation, state_fingerprint=_fingerprint(env))
        episode.turns.append(turn)
        started = time.perf_counter()
        try:
            turn.action_text = policy(chat_messages(system_prompt, episode.turns[:-1], observation), env)
        except ConfigError:
            raise
        except Exception as exc:
            return _failed(episode, f"policy raised {exc!r}")
        generated = time.perf_counter()
        try:
            observation, reward, terminated, truncated, info = env.step(turn.action_text)
        except EnvInfraError as exc:
            return _infra_truncated(episode, f"env.step: {exc.reason}", exc.kind)
        except Exception as exc:
            tb = traceback.format_exception_only(type(exc), exc)[-1].strip()
            return _failed(episode, f"env.step raised {tb}")
        turn.reward, turn.terminated, turn.truncated = float(reward), bool(terminated), bool(truncated)
        turn.info = dict(info)
        turn.timings = {"generate_s": generated - started, "env_s": time.perf_counter() - generated}
        if (ending := step_ending(bool(terminated), bool(truncated), turn.info)) is not None:
            turn.info.setdefault("next_observation", observation)
            return episode.end(*ending, observation)
    return episode.end(EpisodeStatus.TRUNCATED, f"turn limit of {max_turns} reached", Failure.MODEL, observation)


def _failed(episode: Episode, reason: str) -> Episode:
    """An infrastructure failure (the env or the policy broke), with its reason."""
    if episode.turns and not episode.turns[-1].info:
        episode.turns[-1].info = {"error": reason}
    return episode.end(EpisodeStatus.ERROR, reason, Failure.INFRA)


def _infra_truncated(episode: Episode, reason: str, kind: str) -> Episode:
    """The env reported that its backend broke (`EnvInfraError`): truncated, the infrastructure's fault."""
    if episode.turns:
        episode.turns[-1].info.update(infra_error=reason, infra_kind=kind)
    return episode.end(EpisodeStatus.TRUNCATED, reason, Failure.INFRA)
