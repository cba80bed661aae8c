"""`agentgym eval compare A B`: which tasks flipped between two eval runs, and how each env's scores moved.

A task counts as *solved* in a run when at least half of its scored attempts
succeeded (its pass@1 estimate is >= 0.5). A flip is a task solved in one run
and not in the other: *gained* (solved in B only) or *lost* (solved in A only).
Tasks attempted by only one of the runs are counted, not compared.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from agentgym.errors import ConfigError
from agentgym.eval.metrics import EnvSummary, TaskScore
from agentgym.eval.plan import EvalPlan
from agentgym.eval.runner import score_run

if TYPE_CHECKING:  # the store (SQLAlchemy) is imported where it is used: the CLI starts faster
    from agentgym.store import TrajectoryStore

SOLVED = 0.5  #: a task is solved when at least this fraction of its scored attempts succeeded


@dataclass
class TaskFlip:
    env_id: str
    task_id: str
    rate_a: float  #: fraction of A's attempts that succeeded
    rate_b: float
    attempts_a: int
    attempts_b: int


@dataclass
class EnvComparison:
    env_id: str
    a: EnvSummary | None
    b: EnvSummary | None
    gained: list[TaskFlip] = field(default_factory=list)  #: solved in B, not in A
    lost: list[TaskFlip] = field(default_factory=list)  #: solved in A, not in B
    both_solved: int = 0
    neither_solved: int = 0
    only_a: int = 0  #: tasks attempted only by A
    only_b: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"env_id": self.env_id, "a": self.a.to_dict() if self.a else None,
                "b": self.b.to_dict() if self.b else None, "gained": [asdict(f) for f in self.gained],
                "lost": [asdict(f) for f in self.lost], "both_solved": self.both_solved,
                "neither_solved": self.neither_solved, "only_a": self.only_a, "only_b": self.only_b}


@dataclass
class Comparison:
    run_a: str
    run_b: str
    policy_a: str
    policy_b: str
    envs: list[EnvComparison]

    def to_dict(self) -> dict[str, Any]:
        return {"run_a": self.run_a, "run_b": self.run_b, "policy_a": self.policy_a, "policy_b": self.policy_b,
                "envs": [e.to_dict() for e in self.envs]}


def load_plan(store: TrajectoryStore, run_id: str) -> EvalPlan:
    """The stored plan of eval run `run_id`; `ConfigError` listing the eval runs when it is not one."""
    runs = {r["id"]: r for r in store.runs()}
    evals = sorted(rid for rid, r in runs.items() if (r.get("config") or {}).get("kind") == "eval")
    if run_id not in runs or run_id not in evals:
        what = "is not an eval run" if run_id in runs else "does not exist"
        raise ConfigError(f"run {run_id!r} {what} in {store.display_url}; eval runs there: {evals or 'none'}")
    return EvalPlan.from_config(runs[run_id]["config"])


def compare_runs(store: TrajectoryStore, run_a: str, run_b: str) -> Comparison:
    plan_a, plan_b = load_plan(store, run_a), load_plan(store, run_b)
    scores_a = {s.env_id: s for s in score_run(store, plan_a, run_a)}
    scores_b = {s.env_id: s for s in score_run(store, plan_b, run_b)}
    envs = [_compare_env(env, scores_a.get(env), scores_b.get(env))
            for env in dict.fromkeys([*scores_a, *scores_b])]
    return Comparison(run_a, run_b, plan_a.policy, plan_b.policy, envs)


def _compare_env(env_id: str, a: EnvSummary | None, b: EnvSummary | None) -> EnvComparison:
    out = EnvComparison(env_id, a, b)
    tasks_a = {t.task_id: t for t in (a.task_scores if a else []) if t.attempts}
    tasks_b = {t.task_id: t for t in (b.task_scores if b else []) if t.attempts}
    out.only_a, out.only_b = len(tasks_a.keys() - tasks_b.keys()), len(tasks_b.keys() - tasks_a.keys())
    for task_id in sorted(tasks_a.keys() & tasks_b.keys()):
        ta, tb = tasks_a[task_id], tasks_b[task_id]
        solved_a, solved_b = ta.rate >= SOLVED, tb.rate >= SOLVED
        if solved_a and solved_b:
            out.both_solved += 1
        elif not solved_a and not solved_b:
            out.neither_solved += 1
        else:
            (out.gained if solved_b else out.lost).append(_flip(env_id, ta, tb))
    return out


def _flip(env_id: str, ta: TaskScore, tb: TaskScore) -> TaskFlip:
    return TaskFlip(env_id, ta.task_id, ta.rate, tb.rate, ta.attempts, tb.attempts)
