"""Branch a stored episode at turn T into K continuations played by any policy.

"What would the checkpoint from update 50 have done from turn 7?", "what if the model had done
otherwise here?" The env's state is not stored, so the collector replays the parent's recorded
actions of turns 0..T-1 on a fresh env, checking every turn against the record
(`agentgym.collector.replay`, one engine for `agentgym replay`, branching and TRACE), and then lets
the policy play on. The continuations are recorded as training records them: exact prompt ids,
sampled ids and log-probs for model policies (``hf:``, ``openai:``, ``vllm:``), text for text policies
(``random``, ``solver``, ``scripted:``). The children share the parent's group, carry ``parent_id``
and ``branch_turn = T``, and copy turns 0..T-1 exactly; when the parent was played by a text policy
(no ids), the copied turns get the ids this model's chat template makes, with loss mask 0.

    children = await branch(store, BranchPlan(episode_id, 7, "hf:runs/q@update-50"), opened, k=4)
    child = branch_episode(store, BranchPlan(episode_id, 3, "solver"))    # synchronous, text policies
"""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentgym.collector import Collector
from agentgym.collector.replay import BranchError
from agentgym.errors import ConfigError
from agentgym.policy.loading import OpenedPolicy, PolicyOptions, open_policy
from agentgym.registration import make, resolve_turn_limit, turn_limit
from agentgym.trajectory import Episode

if TYPE_CHECKING:  # the store (SQLAlchemy) is imported where it is used: the CLI starts faster
    from agentgym.store import TrajectoryStore

__all__ = ["BranchError", "BranchPlan", "branch", "branch_episode", "recorded_env_kwargs", "validate_turn"]


@dataclass(frozen=True)
class BranchPlan:
    """Where to branch a stored episode and who plays on (not TRACE's `credit.BranchRequest`)."""

    episode_id: str
    from_turn: int  #: 0-based turn at which the new policy takes over (0 = from the start)
    policy: str = "random"  #: any policy spec (`agentgym.policy.spec`)
    seed: int = 0  #: seed of the policy's sampling
    max_turns: int | None = None  #: total turn limit of the children (default: the parent's recorded one)
    env_kwargs: dict[str, Any] = field(default_factory=dict)  #: make() kwargs (default: the recorded ones)


async def branch(store: TrajectoryStore, plan: BranchPlan, opened: OpenedPolicy, k: int) -> list[Episode]:
    """Store and return `k` continuations of `plan.episode_id` from `plan.from_turn` by `opened`."""
    if k < 1:
        raise ConfigError(f"-n must be >= 1 continuation, got {k}")
    parent = store.get(plan.episode_id)
    validate_turn(parent, plan.from_turn)
    kwargs = plan.env_kwargs or recorded_env_kwargs(store, parent)
    limit = max(_turn_limit(parent, plan), plan.from_turn + 1)
    factory: Any = functools.partial(make, parent.env_id, **kwargs)
    factory.env_id = parent.env_id
    collector = Collector(factory, opened.backend, None, tokenizer=opened.prompt_tokenizer, sampling=opened.sampling,
                          max_turns=limit, progress=False, run_id=parent.run_id, concurrency=max(1, k))
    try:
        children = await collector.branch(parent, plan.from_turn, k)
    finally:
        await collector.aclose()
    record = opened.record()
    for child in children:
        child.metadata.update(env_kwargs=kwargs, max_turns=limit, policy=record, branch={
            "policy": plan.policy, "seed": plan.seed, "from_turn": plan.from_turn,
            "siblings": k, "made_by": "agentgym replay --from-turn"})
    store.put_many(children)
    return children


def branch_episode(store: TrajectoryStore, plan: BranchPlan) -> Episode:
    """One continuation, synchronously (the viewer's branch button; text policies load instantly)."""

    async def run() -> Episode:
        opened = await open_policy(plan.policy, PolicyOptions(seed=plan.seed))
        try:
            return (await branch(store, plan, opened, 1))[0]
        finally:
            await opened.aclose()

    return asyncio.run(run())


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


def _turn_limit(parent: Episode, plan: BranchPlan) -> int:
    recorded = parent.metadata.get("max_turns")
    return resolve_turn_limit(plan.max_turns, recorded if isinstance(recorded, int) else None,
                              turn_limit(parent.env_id))
