"""Run an eval plan through the collector: every task k times, resumable, infra failures retried.

Each task's attempts are one collector group; the collector stores a group as
soon as it finishes, so an eval killed at any moment has stored whole groups
only. `remaining` counts, per task, the scored attempts already in the store
(infrastructure failures do not count), and a run or a `--resume` rolls out
exactly what is missing: every task ends with exactly k scored attempts.
Attempts lost to infrastructure failures are retried for up to
`max_infra_retries` more rounds; what is still missing after that is reported
(and a later `--resume` tries again), never scored as a model failure.
"""

from __future__ import annotations

import functools
import time
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentgym.collector import Collector, Task
from agentgym.eval.metrics import EnvSummary, summarize
from agentgym.eval.plan import EvalEnv, EvalPlan
from agentgym.policy.loading import OpenedPolicy
from agentgym.registration import make
from agentgym.trajectory import Episode, EpisodeStatus, Failure

if TYPE_CHECKING:  # the store (SQLAlchemy) is imported where it is used: the CLI starts faster
    from agentgym.store import TrajectoryStore


@dataclass
class EvalResult:
    """What one `run_eval` call did, and the scores of the whole eval run."""

    run_id: str
    summaries: list[EnvSummary]
    seconds: float = 0.0
    episodes_run: int = 0  #: episodes rolled out by this call (resumed evals skip the stored ones)
    infra_retried: int = 0  #: attempts rolled out again after an infrastructure failure
    missing: dict[str, int] = field(default_factory=dict)  #: env -> attempts still missing (infra failures)

    @property
    def complete(self) -> bool:
        return not any(self.missing.values())


class _Tagging:
    """A store proxy that adds the eval's metadata to every episode the collector saves."""

    def __init__(self, store: TrajectoryStore, extra: dict[str, Any]):
        self.store, self.extra = store, extra
        self.saved = 0

    def put_many(self, episodes: Iterable[Episode]) -> int:
        episodes = list(episodes)
        for ep in episodes:
            ep.metadata.update(self.extra)
        self.saved += sum(ep.status != EpisodeStatus.PARTIAL for ep in episodes)
        return self.store.put_many(episodes)


def remaining(store: TrajectoryStore, run_id: str, env: EvalEnv, k: int) -> dict[str, int]:
    """task id -> scored attempts still missing, in the env's task order."""
    done = Counter(r["task_id"] for r in store.summaries(run_id=run_id, env_id=env.env_id)
                   if r["failure"] != Failure.INFRA and r["status"] != EpisodeStatus.PARTIAL)
    return {t: k - done[t] for t in env.task_ids if done[t] < k}


async def run_eval(plan: EvalPlan, opened: OpenedPolicy, store: TrajectoryStore, run_id: str, *,
                   concurrency: int = 32, progress: bool = True) -> EvalResult:
    """Roll out what the eval run still lacks, then score everything it has stored."""
    started = time.perf_counter()
    result = EvalResult(run_id, [])
    for env in plan.envs:
        tag = _Tagging(store, {"eval": {"run": run_id, "k": plan.k}, "policy": opened.record(),
                               "env_kwargs": env.env_kwargs, "max_turns": env.max_turns})
        first = True
        for _ in range(plan.max_infra_retries + 1):
            todo = remaining(store, run_id, env, plan.k)
            if not todo:
                break
            if not first:
                result.infra_retried += sum(todo.values())
            await _collect(plan, opened, env, todo, tag, run_id, concurrency, progress)
            first = False
        result.episodes_run += tag.saved
        result.missing[env.env_id] = sum(remaining(store, run_id, env, plan.k).values())
    result.summaries = score_run(store, plan, run_id)
    result.seconds = time.perf_counter() - started
    return result


async def _collect(plan: EvalPlan, opened: OpenedPolicy, env: EvalEnv, todo: dict[str, int], tag: _Tagging,
                   run_id: str, concurrency: int, progress: bool) -> None:
    factory: Any = functools.partial(make, env.env_id, **env.env_kwargs)
    factory.env_id = env.env_id
    collector = Collector(factory, opened.backend, tag, tokenizer=opened.prompt_tokenizer, sampling=opened.sampling,
                          max_turns=env.max_turns, concurrency=concurrency, run_id=run_id, progress=progress,
                          **plan.collector_settings())
    index = {t: i for i, t in enumerate(env.task_ids)}
    by_size: dict[int, list[Task]] = defaultdict(list)
    for task_id, missing in todo.items():
        by_size[missing].append(Task(task_id, seed=plan.seed + index[task_id]))
    try:
        for size, tasks in sorted(by_size.items(), reverse=True):
            await collector.collect(tasks, group_size=size)
    finally:
        await collector.aclose()


def score_run(store: TrajectoryStore, plan: EvalPlan, run_id: str) -> list[EnvSummary]:
    """Per-env summaries of everything the eval run has stored (only its planned tasks count)."""
    out = []
    for env in plan.envs:
        wanted = set(env.task_ids)
        episodes = [e for e in store.iter_episodes(run_id=run_id, env_id=env.env_id) if e.task_id in wanted]
        out.append(summarize(env.env_id, episodes, plan.k, plan.success_reward))
    return out

