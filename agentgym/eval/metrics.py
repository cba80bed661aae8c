"""Scores of an eval: pass@k by the unbiased estimator, mean reward with a 95% interval, per-env summaries.

pass@k (Chen et al., 2021): with n attempts of a task of which c succeeded, the
probability that at least one of k attempts drawn without replacement succeeds is
``1 - C(n - c, k) / C(n, k)``; averaged over tasks. It is unbiased for n >= k,
and undefined for n < k (those tasks are left out and counted).

Infrastructure failures (``failure == "infra"``: a sandbox died, the endpoint
went away) are never scored: they are neither successes nor failures of the model.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from agentgym.trajectory import Episode, EpisodeStatus, Failure

Z95 = 1.959963984540054  #: two-sided 95% quantile of the normal distribution


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task with `c` successes in `n` attempts (needs 1 <= k <= n)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.prod((n - c - i) / (n - i) for i in range(k))


def mean_ci95(values: list[float]) -> tuple[float, float]:
    """(mean, half-width of a 95% normal-approximation interval); half-width 0 for fewer than 2 values."""
    if not values:
        return float("nan"), float("nan")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    return mean, Z95 * statistics.stdev(values) / math.sqrt(len(values))


def scored(episode: Episode) -> bool:
    """Counts towards the model's score: finished, and not an infrastructure failure."""
    return episode.failure != Failure.INFRA and episode.status != EpisodeStatus.PARTIAL


@dataclass
class TaskScore:
    """One task's attempts."""

    env_id: str
    task_id: str
    attempts: int = 0  #: scored attempts (n)
    successes: int = 0  #: c
    infra: int = 0  #: attempts lost to infrastructure failures (not scored)

    @property
    def rate(self) -> float:
        return self.successes / self.attempts if self.attempts else float("nan")


@dataclass
class EnvSummary:
    """The per-env row of an eval's table (and its JSON)."""

    env_id: str
    k: int
    tasks: int = 0
    episodes: int = 0  #: scored episodes
    success: float = float("nan")  #: fraction of scored episodes that succeeded
    reward_mean: float = float("nan")
    reward_ci95: float = float("nan")  #: half-width of the 95% interval of the mean reward
    pass_at_1: float = float("nan")
    pass_at_k: float = float("nan")
    tasks_short: int = 0  #: tasks with fewer than k scored attempts (left out of pass@k)
    turns_mean: float = float("nan")
    tokens_in_mean: float = float("nan")  #: prompt tokens the model read per episode (every turn's full context)
    tokens_out_mean: float = float("nan")  #: sampled tokens per episode
    capped_turns: int = 0  #: turns whose generation stopped at max_new_tokens
    windowed_turns: int = 0  #: turns whose prompt a context window cut
    dropped_tokens: int = 0  #: prompt tokens the context window dropped, summed over turns
    infra_failures: int = 0  #: episodes lost to infrastructure failures (retried, never scored)
    task_scores: list[TaskScore] = field(default_factory=list)

    def to_dict(self, *, tasks: bool = False) -> dict[str, Any]:
        data = asdict(self)
        data["task_scores"] = [asdict(t) for t in self.task_scores] if tasks else None
        if not tasks:
            data.pop("task_scores")
        return {key: (None if isinstance(v, float) and math.isnan(v) else v) for key, v in data.items()}


def token_counts(episode: Episode) -> tuple[int, int]:
    """(prompt tokens read over all turns, tokens sampled) of one episode."""
    context = read = out = 0
    for turn in episode.turns:
        if (turn.info.get("context") or {}).get("reset"):
            context = 0  # a context window rendered this turn's whole prompt afresh
        context += len(turn.prompt_ids)
        read += context
        out += len(turn.action_ids)
        context += len(turn.action_ids)
    return read, out


def summarize(env_id: str, episodes: Iterable[Episode], k: int, success_reward: float) -> EnvSummary:
    """The summary of one env's episodes of an eval run."""
    summary = EnvSummary(env_id, k)
    by_task: dict[str, TaskScore] = {}
    rewards, turns, tokens_in, tokens_out = [], [], [], []
    for ep in episodes:
        score = by_task.setdefault(ep.task_id, TaskScore(env_id, ep.task_id))
        if not scored(ep):
            score.infra += ep.failure == Failure.INFRA
            continue
        score.attempts += 1
        score.successes += ep.total_reward >= success_reward
        rewards.append(ep.total_reward)
        turns.append(ep.num_turns)
        read, out = token_counts(ep)
        tokens_in.append(read)
        tokens_out.append(out)
        summary.capped_turns += sum(t.finish_reason == "length" for t in ep.turns)
        cut = ep.metadata.get("context") or {}
        summary.windowed_turns += int(cut.get("windowed_turns", 0))
        summary.dropped_tokens += int(cut.get("dropped_tokens", 0))
    summary.task_scores = sorted(by_task.values(), key=lambda t: t.task_id)
    summary.tasks = len(by_task)
    summary.episodes = len(rewards)
    summary.infra_failures = sum(t.infra for t in by_task.values())
    _fill_rates(summary, rewards, turns, tokens_in, tokens_out)
    return summary


def _fill_rates(summary: EnvSummary, rewards: list[float], turns: list[int], tokens_in: list[int],
                tokens_out: list[int]) -> None:
    if not rewards:
        return
    tasks = [t for t in summary.task_scores if t.attempts]
    summary.success = sum(t.successes for t in tasks) / summary.episodes
    summary.reward_mean, summary.reward_ci95 = mean_ci95(rewards)
    summary.pass_at_1 = statistics.fmean(t.rate for t in tasks)
    full = [t for t in tasks if t.attempts >= summary.k]
    summary.tasks_short = summary.tasks - len(full)
    if full:
        summary.pass_at_k = statistics.fmean(pass_at_k(t.attempts, t.successes, summary.k) for t in full)
    summary.turns_mean = statistics.fmean(turns)
    summary.tokens_in_mean = statistics.fmean(tokens_in)
    summary.tokens_out_mean = statistics.fmean(tokens_out)


def group_by_env(episodes: Iterable[Episode]) -> dict[str, list[Episode]]:
    out: dict[str, list[Episode]] = defaultdict(list)
    for ep in episodes:
        out[ep.env_id].append(ep)
    return dict(out)
