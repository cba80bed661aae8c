"""`agentgym eval reverify RUN`: re-score stored episodes with the env's current reward code.

After fixing a reward bug, the stored actions are replayed on a fresh env (same
seed and task) and the rewards it gives now are compared with the stored ones.
An episode whose observations no longer match the record (the env's dynamics
changed, not only its rewards) is reported as diverged at that turn and not
re-scored. With ``write=True`` the changed episodes are stored with their new
rewards, the old total kept in ``metadata["reverified"]``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentgym.eval.compare import load_plan
from agentgym.eval.metrics import scored
from agentgym.registration import make
from agentgym.trajectory import Episode, same_value

if TYPE_CHECKING:  # the store (SQLAlchemy) is imported where it is used: the CLI starts faster
    from agentgym.store import TrajectoryStore


@dataclass
class Rescore:
    """One episode whose score changed (or that could not be re-scored)."""

    episode_id: str
    env_id: str
    task_id: str
    old_reward: float
    new_reward: float | None  #: None when the replay diverged
    old_success: bool
    new_success: bool | None
    diverged_at: int | None = None  #: the turn whose observation no longer matches the record
    turn_rewards: list[float] | None = None


def reverify_run(store: TrajectoryStore, run_id: str, *, write: bool = False) -> tuple[int, list[Rescore]]:
    """(episodes checked, those whose reward changed or whose replay diverged)."""
    plan = load_plan(store, run_id)
    envs: dict[tuple[str, str], Any] = {}
    checked, changes = 0, []
    try:
        for ep in store.iter_episodes(run_id=run_id):
            if not scored(ep) or not ep.turns:
                continue
            kwargs = ep.metadata.get("env_kwargs") or {}
            key = (ep.env_id, repr(sorted(kwargs.items())))
            env = envs.get(key) or envs.setdefault(key, make(ep.env_id, **kwargs))
            checked += 1
            change = _rescore(env, ep, plan.success_reward)
            if change is not None:
                changes.append(change)
                if write and change.new_reward is not None:
                    _write(store, ep, change)
    finally:
        for env in envs.values():
            env.close()
    return checked, changes


def _rescore(env: Any, ep: Episode, success_reward: float) -> Rescore | None:
    options = {"task_id": ep.task_id} if ep.task_id else None
    observation, _ = env.reset(seed=ep.seed, options=options)
    rewards: list[float] = []
    for turn in ep.turns:
        if not same_value("observation", observation, turn.observation):
            return _change(ep, None, success_reward, diverged_at=turn.index)
        if turn.action_text == "" and "error" in turn.info and turn is ep.turns[-1]:
            rewards.append(turn.reward)  # the recorded episode broke before acting here
            break
        observation, reward, terminated, truncated, _ = env.step(turn.action_text)
        rewards.append(float(reward))
        if (terminated or truncated) and turn is not ep.turns[-1]:
            return _change(ep, None, success_reward, diverged_at=turn.index + 1)
    if all(same_value("reward", a, t.reward) for a, t in zip(rewards, ep.turns, strict=False)):
        return None
    return _change(ep, rewards, success_reward)


def _change(ep: Episode, rewards: list[float] | None, success_reward: float, diverged_at: int | None = None) -> Rescore:
    new = float(sum(rewards)) if rewards is not None else None
    return Rescore(ep.id, ep.env_id, ep.task_id, ep.total_reward, new, ep.total_reward >= success_reward,
                   None if new is None else new >= success_reward, diverged_at, rewards)


def _write(store: TrajectoryStore, ep: Episode, change: Rescore) -> None:
    for turn, reward in zip(ep.turns, change.turn_rewards or [], strict=False):
        turn.reward = reward
    ep.metadata["reverified"] = {"at": time.time(), "old_reward": ep.total_reward}
    ep.finish()
    store.put(ep)
