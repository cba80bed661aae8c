"""The one replay engine: put a fresh env into the state a recorded episode was in before a given turn.

`agentgym replay` (re-execute a whole episode), `agentgym replay --from-turn`, the viewer's
branch button and TRACE's tree search all come through here, on the collector's env calls
(its timeouts and worker threads). Two ways, in order of preference:

1. **Snapshot.** When the collector ran with ``record_snapshots=True`` and the env has
   `snapshot`/`restore`, the token taken before that turn is restored into a fresh env
   (after a reset with the episode's seed and task).
2. **Replay.** Otherwise the env is reset with the episode's seed and task and the recorded
   actions of the earlier turns are stepped again. Each replayed turn is compared with the
   record (`agentgym.trajectory.turn_difference`: observation, reward, terminated; and the env
   truncating where the record went on); the first difference refuses the replay (`BranchError`),
   since a branch from there would not share its parent's prefix.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agentgym.collector.faults import EpisodeFault, check_reset, check_step
from agentgym.errors import AgentGymError
from agentgym.trajectory import Episode, Turn, TurnDifference, turn_difference

EnvCall = Callable[..., Awaitable[Any]]
#: compared after each replayed step (the action is the recorded one by construction)
STEP_FIELDS = ("reward", "terminated")


class BranchError(AgentGymError):
    """An episode cannot be replayed up to the requested turn (bad turn, env not deterministic, env changed)."""

    def __init__(self, message: str, difference: TurnDifference | None = None):
        super().__init__(message)
        self.difference = difference  #: where the replay parted from the record, when that is the reason


async def restore(env: Any, episode: Episode, turn: int, snapshot: Any, env_call: EnvCall) -> str:
    """Bring `env` to the state before `episode.turns[turn]`; returns that turn's observation."""
    inner = getattr(env, "unwrapped", env)
    if snapshot is not None:
        await _reset(env, episode, env_call)
        observation = await env_call("env.restore", env, "restore", snapshot)
    else:
        if not getattr(inner, "deterministic", True):
            raise BranchError(f"{type(inner).__name__} is not deterministic and no snapshot of episode {episode.id} "
                              f"at turn {turn} was recorded; collect with record_snapshots=True to branch it")
        observation = await replay_turns(env, episode, turn, env_call)
    _check(episode, Turn(index=turn, observation=observation), episode.turns[turn], ("observation",))
    return observation


async def replay_turns(env: Any, episode: Episode, upto: int, env_call: EnvCall) -> str:
    """Reset `env` like `episode` and step its recorded actions of turns ``0..upto-1``, checking each turn.

    Returns the observation after the last replayed step. `BranchError` (with the `TurnDifference`)
    at the first turn that does not match the record.
    """
    observation = await _reset(env, episode, env_call)
    for past in episode.turns[:upto]:
        _check(episode, Turn(index=past.index, observation=observation), past, ("observation",))
        if past is episode.turns[-1] and not past.action_text and "error" in past.info:
            break  # the recorded episode broke before acting here: nothing to step
        try:
            observation, reward, terminated, truncated, _ = check_step(
                await env_call("env.step", env, "step", past.action_text))
        except EpisodeFault as fault:
            raise BranchError(f"replaying episode {episode.id}: step {past.index} failed: {fault.reason}",
                              TurnDifference(past.index, "error", "a successful step", fault.reason)) from None
        replayed = Turn(index=past.index, reward=reward, terminated=terminated, truncated=truncated)
        _check(episode, replayed, past, STEP_FIELDS)
        if truncated and not past.truncated:  # an agentgym limit may end a record where the env went on
            _check(episode, replayed, past, ("truncated",))
        if (terminated or truncated) and past.index < upto - 1:
            raise BranchError(f"episode {episode.id} ended at turn {past.index} on replay, before turn {upto}; "
                              f"branch at a turn up to {past.index}",
                              TurnDifference(past.index + 1, "length", episode.num_turns, past.index + 1))
    return observation


async def _reset(env: Any, episode: Episode, env_call: EnvCall) -> str:
    options = {"task_id": episode.task_id} if episode.task_id else None
    try:
        observation, _ = check_reset(await env_call("env.reset", env, "reset", seed=episode.seed, options=options))
    except EpisodeFault as fault:
        raise BranchError(f"cannot reset {episode.env_id} like episode {episode.id}: {fault.reason}",
                          TurnDifference(0, "error", "a successful reset", fault.reason)) from None
    return observation


def _check(episode: Episode, replayed: Turn, recorded: Turn, fields: tuple[str, ...]) -> None:
    difference = turn_difference(recorded, replayed, fields)
    if difference is not None:
        raise BranchError(
            f"replaying episode {episode.id} ({episode.env_id}, task {episode.task_id!r}, seed {episode.seed}) "
            f"diverged at {difference.describe()}; the env is not deterministic given seed, task and actions, or "
            "has changed since (record snapshots, or fix the env)", difference)
