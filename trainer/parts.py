"""The typed parts of one training run: what the trainer loops (`trainer.loops`) read and call.

One bag, `Components`, for every way a run is assembled:

- a local run (`trainer.components.build_components`): the real collector, data manager,
  rollout driver and weight sync in this process;
- the Ray trainer actor (`trainer.ray_runtime.trainer_actor`): the same `PolicySide`, with the
  data manager, rollout driver, evaluator and weight sync as proxies to other actors;
- the pipeline benchmark (`bench/pipeline.py`): the real collector and data manager with a
  simulated policy update and weight sync (labelled there).

Each remote or simulated stage satisfies the Protocol its field is typed with, so the loops
are one piece of code for all three.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentgym.trainer.weight_sync import WeightSync

from agentgym.collector.config import CollectResult, Task
from agentgym.data import Cursor, PipelineMetrics, TrainBatch


class UpdateReport(Protocol):
    """What the metrics row reads from one update (`trainer.update.UpdateStats`)."""

    tokens: int
    seconds: float

    def flat(self) -> dict[str, float]: ...


class Updater(Protocol):
    """One policy update per batch (`trainer.update.PolicyUpdater`)."""

    credit_models: Any  #: SPA/OPRL's learned credit models (checkpointed), or None
    reference: Any  #: the frozen KL reference model, or None
    updates_done: int
    last_credit: Any  #: the `CreditResult` of the last update (written back to the store), or None

    def update(self, batch: TrainBatch) -> UpdateReport: ...


class Tally(Protocol):
    """Outcomes of the episodes collected since the last take (`trainer.collection.CollectTally`)."""

    episodes: int
    successes: int
    reward_sum: float
    costs: list[Any]  #: `agentgym.cost.EpisodeCost` of each collected episode that recorded one
    branch_points: int  #: TRACE: branch points planned, the sum of their scores, how many ended mixed
    branch_score: float
    branch_mixed: int
    extra_roots: int  #: TRACE: rollouts spent on extra roots


class BatchSource(Protocol):
    """The collection side (`trainer.collection.RolloutDriver`): whole batches in sync mode, a producer in async."""

    failures: list[BaseException]
    allocator: Any  #: TRACE's branch allocator (checkpointed), or None

    async def collect_batch(self, version: int, max_rounds: int = 4) -> TrainBatch | None: ...

    async def produce(self, stop: asyncio.Event) -> None: ...

    def take_tally(self) -> Tally: ...


class BatchQueue(Protocol):
    """The data manager as the trainer sees it (`agentgym.data.DataManager`)."""

    def set_version(self, version: int) -> None: ...

    def pull(self, version: int | None = None, timeout: float | None = None) -> TrainBatch | None: ...

    def close(self) -> None: ...

    def cursor(self) -> Cursor: ...

    def metrics(self) -> PipelineMetrics: ...


class EvalCollector(Protocol):
    """Greedy held-out evaluation (`agentgym.collector.Collector` without a store)."""

    async def collect(self, tasks: Iterable[Task], *, group_size: int = 1) -> CollectResult: ...


@dataclass
class PolicySide:
    """The trainer's half of a run: the policy and everything that updates it."""

    model: Any
    tokenizer: Any
    optimizer: Any
    scheduler: Any  #: has `get_last_lr()`
    critic: Any  #: `trainer.value_head.Critic` for estimators with a critic, else None
    updater: Updater
    prompt_tokenizer: Any  #: renders chat prompts (SFT warm start)
    packed: bool  #: padding-free packed batches (else padded rows)
    memory: Any = None  #: `trainer.distributed.memory_plan.MemoryPlan` per rank (printed at start), or None


@dataclass
class Components:
    """Every live part of one run: the policy side plus the stages it trades batches and weights with."""

    policy: PolicySide
    sync: WeightSync
    dm: BatchQueue
    driver: BatchSource
    train_tasks: list[str]
    eval_tasks: list[str] = field(default_factory=list)
    eval_collector: EvalCollector | None = None
    backend: Any = None  #: the in-process rollout backend, closed with the run (None when remote)
    collectors: list[Any] = field(default_factory=list)  #: in-process collectors, closed with the run
    env: Any = None  #: the in-process collectors' env source (`components.env_source`; None when remote)

    async def aclose(self) -> None:
        """Close the in-process collectors and backend (remote stages are closed by their owners)."""
        for col in self.collectors:
            await col.aclose()
        if self.backend is not None:
            await self.backend.aclose()
