"""Branch a stored episode at turn T and roll out a new continuation with any policy.

"What if the model had done otherwise here?" The env's state is not stored,
so the branch is made the way ARCHITECTURE.md prescribes for envs without a
stored snapshot: reset a fresh env with the episode's seed and task, replay the
recorded actions of turns 0..T-1 and check that every observation, reward and
end flag matches the record (a mismatch means the env is not deterministic, or
has changed since, and the branch would be a lie). From the state the episode
was in before its action at turn T, a policy (``random``, ``solver`` or
``scripted:MODULE:FUNC``) plays on. The result is a child episode:
``parent_id`` = the original, ``branch_turn`` = T, turns 0..T-1 copied exactly
(tokens, log-probs and all), new turns from T on.

    child = branch_episode(store, episode_id, from_turn=3, policy="solver")
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Any

from agentgym.errors import AgentGymError
from agentgym.policy.simple import resolve_policy
from agentgym.registration import make, resolve_turn_limit, turn_limit
from agentgym.rollout import continue_episode
from agentgym.store import TrajectoryStore
from agentgym.trajectory import Episode, new_id


class BranchError(AgentGymError):
    """An episode cannot be branched at the requested turn (bad turn, env diverged on replay)."""


@dataclass(frozen=True)
class BranchRequest:
    """Where to branch and who plays on."""

    episode_id: str
    from_turn: int  #: 0-based turn at which the new policy takes over (0 = from the start)
    policy: str = "random"  #: random, solver or scripted:MODULE:FUNC
    seed: int = 0  #: seed of the random policy
    max_turns: int | None = None  #: total turn limit of the child (default: the env's registered limit)
    env_kwargs: dict[str, Any] = field(default_factory=dict)  #: make() kwargs (default: the run's recorded ones)


def branch_episode(store: TrajectoryStore, request: BranchRequest) -> Episode:
    """Branch the stored episode, store the child and return it."""
    parent = store.get(request.episode_id)
    validate_turn(parent, request.from_turn)
    policy = resolve_policy(request.policy, seed=request.seed)
    env_kwargs = request.env_kwargs or recorded_env_kwargs(store, parent)
    env = make(parent.env_id, **env_kwargs)
    try:
        observation = replay_prefix(env, parent, request.from_turn)
        recorded = parent.metadata.get("max_turns")
        limit = request.max_turns or (recorded if isinstance(recorded, int) else None) or _turn_limit(parent.env_id, env)
        child = _child_of(parent, request)
        continue_episode(env, policy, child, observation, max(limit, request.from_turn + 1))
    finally:
        env.close()
    store.put(child)
    return child


def validate_turn(episode: Episode, turn: int) -> None:
    """`BranchError` unless `turn` names a state of `episode` (0..num_turns-1)."""
    if not episode.turns:
        raise BranchError(f"episode {episode.id} has no turns to branch from")
    if not 0 <= turn < episode.num_turns:
        raise BranchError(
            f"cannot branch episode {episode.id} at turn {turn}: it has turns 0..{episode.num_turns - 1}; "
            "pick one of those (the new policy acts from that turn's observation)"
        )


def recorded_env_kwargs(store: TrajectoryStore, episode: Episode) -> dict[str, Any]:
    """The env kwargs the episode was made with: its metadata, else its run's config, else none."""
    kwargs = episode.metadata.get("env_kwargs")
    if isinstance(kwargs, dict):
        return dict(kwargs)
    for run in store.runs():
        if run["id"] == episode.run_id and isinstance((run["config"] or {}).get("env_kwargs"), dict):
            return dict(run["config"]["env_kwargs"])
    return {}


def replay_prefix(env: Any, episode: Episode, upto: int) -> str:
    """Reset `env` like `episode` and replay its actions before turn `upto`; returns the observation at `upto`.

    Every replayed observation, reward and end flag must match the record, or `BranchError`
    names the first turn and field that differ.
    """
    options = {"task_id": episode.task_id} if episode.task_id else None
    try:
        observation, _ = env.reset(seed=episode.seed, options=options)
    except Exception as exc:
        raise BranchError(f"cannot reset {episode.env_id} like episode {episode.id}: {exc!r}") from exc
    for turn in episode.turns[:upto]:
        _expect(episode, turn.index, "observation", turn.observation, observation)
        try:
            observation, reward, terminated, truncated, _ = env.step(turn.action_text)
        except Exception as exc:
            raise BranchError(f"replaying episode {episode.id}: step {turn.index} raised {exc!r}") from exc
        if not math.isclose(float(reward), turn.reward, rel_tol=1e-9, abs_tol=1e-12):
            _expect(episode, turn.index, "reward", turn.reward, float(reward))
        _expect(episode, turn.index, "terminated", turn.terminated, bool(terminated))
        if terminated or truncated:
            raise BranchError(
                f"episode {episode.id} ended at turn {turn.index} on replay, before turn {upto}; "
                f"branch at a turn up to {turn.index}"
            )
    _expect(episode, upto, "observation", episode.turns[upto].observation, observation)
    return observation


def _expect(episode: Episode, turn: int, name: str, recorded: Any, replayed: Any) -> None:
    if recorded != replayed:
        raise BranchError(
            f"replaying episode {episode.id} ({episode.env_id}, task {episode.task_id!r}, seed {episode.seed}) "
            f"diverged at turn {turn}: {name} was {_short(recorded)} in the record but {_short(replayed)} on "
            "replay; the env is not deterministic or has changed since, so it cannot be branched by replay"
        )


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _turn_limit(env_id: str, env: Any) -> int:
    return resolve_turn_limit(turn_limit(env_id, env))


def _child_of(parent: Episode, request: BranchRequest) -> Episode:
    prefix = [copy.deepcopy(t) for t in parent.turns[: request.from_turn]]
    return Episode(
        id=new_id(), run_id=parent.run_id, env_id=parent.env_id, task_id=parent.task_id, seed=parent.seed,
        group_id=parent.group_id, parent_id=parent.id, branch_turn=request.from_turn, turns=prefix,
        policy_version=None, created_at=time.time(),
        metadata={"branch": {"policy": request.policy, "seed": request.seed, "from_turn": request.from_turn,
                             "made_by": "agentgym replay --from-turn"}},
    )
