"""Branch a stored episode at turn T into K continuations played by a model (``hf:``, ``openai:``, ``vllm:``).

"What would the checkpoint from update 50 have done from turn 7?" The
continuations go through the collector, so they are recorded token by token
as training records them: exact prompt ids, sampled ids, log-probs, the policy
version. The env is brought to turn T by replaying the parent's actions and
checking every observation (`agentgym.collector.branching`). The children
share the parent's group, carry ``parent_id`` and ``branch_turn = T``, and copy
turns 0..T-1 exactly; when the parent was played by a text policy (no ids),
the copied turns get the ids this model's chat template makes, with loss mask 0.

    children = await branch_with_policy(store, BranchRequest(episode_id, 7, "hf:runs/q@update-50"), opened, k=4)

Text policies (``random``, ``solver``, ``scripted:``) branch through
`agentgym.branch_replay.branch_episode`.
"""

from __future__ import annotations

import functools
from typing import Any

from agentgym.branch_replay import BranchError, BranchRequest, recorded_env_kwargs, validate_turn
from agentgym.collector import Collector
from agentgym.collector.branching import BranchError as RestoreError
from agentgym.errors import ConfigError
from agentgym.policy.loading import OpenedPolicy
from agentgym.registration import make, registry, resolve_turn_limit
from agentgym.store import TrajectoryStore
from agentgym.trajectory import Episode


async def branch_with_policy(store: TrajectoryStore, request: BranchRequest, opened: OpenedPolicy,
                             k: int) -> list[Episode]:
    """Store and return `k` continuations of `request.episode_id` from `request.from_turn` by `opened`."""
    if k < 1:
        raise ConfigError(f"-n must be >= 1 continuation, got {k}")
    parent = store.get(request.episode_id)
    validate_turn(parent, request.from_turn)
    kwargs = request.env_kwargs or recorded_env_kwargs(store, parent)
    limit = max(_turn_limit(parent, request), request.from_turn + 1)
    factory: Any = functools.partial(make, parent.env_id, **kwargs)
    factory.env_id = parent.env_id
    collector = Collector(factory, opened.backend, None, tokenizer=opened.prompt_tokenizer, sampling=opened.sampling,
                          max_turns=limit, progress=False, run_id=parent.run_id, concurrency=max(1, k))
    try:
        children = await collector.branch(parent, request.from_turn, k)
    except RestoreError as exc:
        raise BranchError(str(exc)) from None
    finally:
        await collector.aclose()
    record = opened.record()
    for child in children:
        child.metadata.update(env_kwargs=kwargs, max_turns=limit, policy=record, branch={
            "policy": request.policy, "seed": request.seed, "from_turn": request.from_turn,
            "siblings": k, "made_by": "agentgym replay --from-turn"})
    store.put_many(children)
    return children


def _turn_limit(parent: Episode, request: BranchRequest) -> int:
    recorded = parent.metadata.get("max_turns")
    return resolve_turn_limit(request.max_turns, recorded if isinstance(recorded, int) else None,
                      registry[parent.env_id].max_turns)
