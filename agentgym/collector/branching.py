"""Putting a fresh env into the state an episode was in before a given turn (TRACE branching).

Two ways, in order of preference:

1. **Snapshot.** When the collector ran with ``record_snapshots=True`` and the
   env has `snapshot`/`restore`, the token taken before that turn is restored
   into a fresh env (after a reset with the episode's seed and task).
2. **Replay.** Otherwise the env is reset with the episode's seed and task and
   the recorded actions of the earlier turns are stepped again. Every replayed
   observation is compared with the recorded one; a difference means the env
   is not deterministic and the branch is refused (`BranchError`), since its
   children would not share the parent's prefix.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from agentgym.collector.faults import check_reset, check_step
from agentgym.errors import AgentGymError
from agentgym.trajectory import Episode

EnvCall = Callable[..., Awaitable[Any]]


class BranchError(AgentGymError):
    """An episode cannot be branched at the requested turn."""


async def restore(env: Any, episode: Episode, turn: int, snapshot: Any, env_call: EnvCall) -> str:
    """Bring `env` to the state before `episode.turns[turn]`; returns that turn's observation."""
    inner = getattr(env, "unwrapped", env)
    options = {"task_id": episode.task_id} if episode.task_id else None
    observation, _ = check_reset(await env_call("env.reset", env, "reset", seed=episode.seed, options=options))
    if snapshot is not None:
        observation = await env_call("env.restore", env, "restore", snapshot)
    else:
        if not getattr(inner, "deterministic", True):
            raise BranchError(f"{type(inner).__name__} is not deterministic and no snapshot of episode {episode.id} "
                              f"at turn {turn} was recorded; collect with record_snapshots=True to branch it")
        for past in episode.turns[:turn]:
            _same(episode, past.index, past.observation, observation)
            observation, *_ = check_step(await env_call("env.step", env, "step", past.action_text))
    _same(episode, turn, episode.turns[turn].observation, observation)
    return observation


def _same(episode: Episode, index: int, recorded: str, replayed: str) -> None:
    if recorded != replayed:
        raise BranchError(f"replaying episode {episode.id} diverged at turn {index}: recorded observation "
                          f"{recorded[:80]!r}, replay gave {replayed[:80]!r}; the env is not deterministic given "
                          "seed, task and actions (record snapshots, or fix the env)")
