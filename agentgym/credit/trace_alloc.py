"""TRACE rollout allocation: spend a fixed budget on roots and on turn-level prefixes.

The collector's branching hook calls, once per round:

    allocator = TraceAllocator(k=2)
    roots = allocator.plan_roots(task_ids, budget=64, n_root=4)        # which tasks get rollouts
    ... collector runs them ...
    branches = allocator.plan(episodes_so_far, budget=32)              # [BranchRequest(episode_id, turn, k)]
    ... collector forks episode `episode_id` after `turn` turns into `k` continuations ...
    allocator.observe(finished_tree)                                   # trains the predictor

A prefix is scored by its mixed-outcome probability `I_k(p_hat) = 1 - p^k - (1-p)^k` (ranking
equals ranking by `p(1-p)`); the greedy pass takes the top prefixes until the budget is spent and
spends leftover budget on extra root rollouts (`BranchRequest(turn=0)`: a fresh rollout of the
same task and seed). Prefixes with p_hat of 0 or 1 score 0 and are never branched.

Calibration: `observe` also trains a `MixPredictor` on what the branch points and root groups
actually gave (did the recorded path and the new continuations end alike?). Once it has seen
`mix_warmup` nodes (None: never), it scores the candidates instead of `I_k(p_hat)`, and each group's root competes
with the prefixes on that same scale, so the budget goes to extra roots where branches of a nearly
deterministic policy would only repeat their parent (measured on Maze-v0: 16-21% of branch points gave
mixed outcomes where `I_2(p_hat)` promised up to 0.5; docs/credit-log.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentgym.credit.batch import TurnBatch
from agentgym.credit.stats import informativeness
from agentgym.credit.trace import ROOT, RolloutTree
from agentgym.credit.trace_predict import (
    BetaPosterior,
    MixPredictor,
    Prefix,
    PrefixPredictor,
    SuccessPredictor,
)
from agentgym.trajectory import Episode, EpisodeStatus, Turn

FINISHED = (EpisodeStatus.COMPLETE, EpisodeStatus.TRUNCATED)


@dataclass(frozen=True)
class BranchRequest:
    """Fork episode `episode_id` after its first `turn` turns into `k` continuations (turn 0: new roots)."""

    episode_id: str
    turn: int
    k: int
    group_id: str = ""
    p_hat: float = 0.5  #: predicted success probability at the branch point
    score: float = 0.0  #: I_k(p_hat)


@dataclass(frozen=True)
class RootRequest:
    """Run `n` fresh rollouts of task `task_key`."""

    task_key: str
    n: int
    p_hat: float = 0.5
    score: float = 0.0


@dataclass(frozen=True)
class ObserveStats:
    """What `TraceAllocator.observe` learned from: leaves, labelled prefixes and the predictor's loss, and the
    tree's branch points (turn > 0) with how many of them ended mixed (not every continuation alike)."""

    n_leaves: int
    n_prefixes: int
    loss: float
    branch_points: int = 0
    branch_mixed: int = 0


class TreeView:
    """Episodes of rollout trees with their absolute path turns (prefix copies resolved)."""

    def __init__(self, episodes: Sequence[Episode]):
        self.episodes = tuple(episodes)
        self.batch = TurnBatch.from_episodes(self.episodes)
        self.tree = RolloutTree.build(self.batch)
        self._paths: dict[int, list[Turn]] = {}

    def path(self, e: int) -> list[Turn]:
        """All turns on episode e's path from the root (shared prefix, then its own)."""
        if e not in self._paths:
            own = self.episodes[e].turns[self.tree.n_copied[e]:]
            p = self.tree.parent[e]
            prefix = self.path(p)[: self.tree.branch_turn[e]] if p != ROOT else []
            self._paths[e] = prefix + list(own)
        return self._paths[e]


def task_key(ep: Episode) -> str:
    """The root a prefix belongs to: the task id, or the group id where the task id is empty."""
    return ep.task_id or ep.group_id


class TraceAllocator:
    """Allocation policy + online success predictor (see the module docstring)."""

    def __init__(self, predictor: SuccessPredictor | None = None, posterior: BetaPosterior | None = None, *,
                 k: int = 2, warmup: int = 32, success_threshold: float | None = None,
                 mix: SuccessPredictor | None = None, mix_warmup: int | None = 64):
        if k < 2:
            raise ValueError(f"TraceAllocator k={k}: a branch point needs k >= 2 continuations to compare.")
        self.predictor = predictor if predictor is not None else PrefixPredictor()
        self.posterior = posterior if posterior is not None else BetaPosterior()
        self.mix = mix if mix is not None else MixPredictor()
        self.k, self.warmup, self.success_threshold, self.mix_warmup = k, warmup, success_threshold, mix_warmup

    @property
    def calibrated(self) -> bool:
        """Whether the mixed-outcome model has seen enough nodes to score candidates (module docstring)."""
        return self.mix_warmup is not None and getattr(self.mix, "n_seen", 0) >= self.mix_warmup

    # ---- prediction -----------------------------------------------------------------------------
    def p_hat(self, prefixes: Sequence[Prefix]) -> np.ndarray:
        """[N] success probabilities: the predictor once warmed up, else the task's Beta posterior."""
        if getattr(self.predictor, "n_seen", self.warmup) >= self.warmup:
            return np.asarray(self.predictor.predict(prefixes), dtype=np.float64)
        return np.array([self.posterior.mean(p.task_key) for p in prefixes])

    def label(self, outcome: float) -> float:
        """Success label of an outcome: R >= threshold, or R clipped into [0, 1] when no threshold."""
        if self.success_threshold is None:
            return float(min(max(outcome, 0.0), 1.0))
        return float(outcome >= self.success_threshold)

    # ---- planning -------------------------------------------------------------------------------
    def plan_roots(self, task_keys: Sequence[str], budget: int, n_root: int = 4) -> list[RootRequest]:
        """Give tasks `n_root` rollouts each, in decreasing p_hat(1 - p_hat), until `budget` is used."""
        scored = sorted(((informativeness(self.posterior.mean(t), 2), i, t) for i, t in enumerate(task_keys)),
                        key=lambda s: (-s[0], s[1]))
        out, left = [], budget
        for score, _, t in scored:
            n = min(n_root, left)
            if n <= 0:
                break
            out.append(RootRequest(t, n, self.posterior.mean(t), float(score)))
            left -= n
        return out

    def candidates(self, view: TreeView) -> list[tuple[int, int, Prefix]]:
        """(episode, k, prefix) for every non-terminal turn boundary each finished episode owns."""
        out = []
        for e, ep in enumerate(view.episodes):
            if ep.status not in FINISHED:
                continue
            path = view.path(e)
            for k in range(max(view.tree.branch_turn[e] + 1, 1), len(path)):
                out.append((e, k, self._prefix(ep, path, k)))
        return out

    def _prefix(self, ep: Episode, path: list[Turn], k: int) -> Prefix:
        return Prefix(task_key(ep), tuple(path[:k]), path[k] if k < len(path) else None,
                      outcome=self.label(ep.total_reward), path_len=len(path))

    def root_candidates(self, view: TreeView) -> list[tuple[int, int, Prefix]]:
        """(episode, 0, prefix) for the first finished root of each group: more roots of its task."""
        firsts: dict[str, int] = {}
        for e, ep in enumerate(view.episodes):
            if view.tree.parent[e] == ROOT and ep.status in FINISHED and ep.turns:
                firsts.setdefault(ep.group_id, e)
        return [(e, 0, self._prefix(view.episodes[e], view.path(e), 0)) for e in firsts.values()]

    def plan(self, tree: Sequence[Episode], budget: int) -> list[BranchRequest]:
        """Branch requests spending at most `budget` continuations on the best prefixes, then on roots."""
        if budget <= 0 or not tree:
            return []
        view = TreeView(tree)
        cands = self.candidates(view)
        if self.calibrated:  # realised mixed-outcome rates, roots competing with prefixes
            cands += self.root_candidates(view)
        prefixes = [c[2] for c in cands]
        p = self.p_hat(prefixes) if cands else np.zeros(0)
        if cands and self.calibrated:
            scores = np.asarray(self.mix.predict(prefixes), dtype=np.float64)
        else:
            scores = informativeness(p, self.k)
        order = sorted(range(len(cands)), key=lambda i: (-scores[i], i))
        out, left = [], budget
        for i in order:
            if scores[i] <= 0 or left < self.k:
                break
            e, k, _ = cands[i]
            ep = view.episodes[e]
            out.append(BranchRequest(ep.id, k, self.k, ep.group_id, float(p[i]), float(scores[i])))
            left -= self.k
        return out + self._spend_on_roots(view, left)

    def _spend_on_roots(self, view: TreeView, left: int) -> list[BranchRequest]:
        """Leftover budget -> extra root rollouts, round-robin over groups by root informativeness."""
        roots: dict[str, Episode] = {}
        for e, ep in enumerate(view.episodes):
            if view.tree.parent[e] == ROOT and ep.status in FINISHED:
                roots.setdefault(ep.group_id, ep)
        if left <= 0 or not roots:
            return []
        eps = list(roots.values())
        p = self.p_hat([Prefix(task_key(ep), (), ep.turns[0] if ep.turns else None) for ep in eps])
        order = sorted(range(len(eps)), key=lambda i: (-informativeness(p[i], 2), i))
        counts = [0] * len(eps)
        for j in range(left):
            counts[order[j % len(order)]] += 1
        return [BranchRequest(eps[i].id, 0, n, eps[i].group_id, float(p[i]), float(informativeness(p[i], n)))
                for i, n in enumerate(counts) if n > 0]

    # ---- learning -------------------------------------------------------------------------------
    def observe(self, tree: Sequence[Episode]) -> ObserveStats:
        """Train the predictor on every (prefix, leaf outcome) of the finished episodes, and the mixed-outcome
        model on every node that got k continuations; update posteriors."""
        view = TreeView(tree)
        points, mixed = self._observe_mix(view)
        prefixes, labels = [], []
        per_task: dict[str, list[float]] = {}
        for e, ep in enumerate(view.episodes):
            if ep.status not in FINISHED:
                continue
            y = self.label(ep.total_reward)
            per_task.setdefault(task_key(ep), []).append(y)
            path = view.path(e)
            for k in range(len(path)):
                prefixes.append(Prefix(task_key(ep), tuple(path[:k]), path[k]))
                labels.append(y)
        for key, ys in per_task.items():
            self.posterior.update(key, sum(ys), len(ys))
        loss = self.predictor.update(prefixes, np.asarray(labels)) if prefixes else 0.0
        return ObserveStats(sum(len(v) for v in per_task.values()), len(prefixes), float(loss), points, mixed)

    def _observe_mix(self, view: TreeView) -> tuple[int, int]:
        """Train `mix` on the tree's nodes: each branch point (its owner's path and its children) and each
        group's first k + 1 roots (the first as the recorded path). Returns (branch points, mixed ones)."""
        eps, tree = view.episodes, view.tree
        done = [ep.status in FINISHED for ep in eps]
        nodes, labels = [], []
        for e, at in enumerate(tree.points):
            for k, kids in at.items():
                if done[e] and all(done[c] for c in kids):
                    nodes.append(self._prefix(eps[e], view.path(e), k))
                    labels.append(float(len({self.label(eps[i].total_reward) for i in (e, *kids)}) > 1))
        points, mixed = len(labels), int(sum(labels))
        for kids in tree.root_children.values():
            roots = [c for c in kids if done[c] and eps[c].turns][: self.k + 1]
            if len(roots) == self.k + 1:
                nodes.append(self._prefix(eps[roots[0]], view.path(roots[0]), 0))
                labels.append(float(len({self.label(eps[c].total_reward) for c in roots}) > 1))
        if nodes:
            self.mix.update(nodes, np.asarray(labels))
        return points, mixed

    def state_dict(self) -> dict[str, Any]:
        return {"k": self.k, "warmup": self.warmup, "success_threshold": self.success_threshold,
                "posterior": self.posterior.state_dict(), "predictor": self.predictor.state_dict(),
                "mix": self.mix.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.k, self.warmup, self.success_threshold = state["k"], state["warmup"], state["success_threshold"]
        self.posterior.load_state_dict(state["posterior"])
        self.predictor.load_state_dict(state["predictor"])
        if "mix" in state:  # checkpoints written before the mixed-outcome model start it afresh; whether it
            self.mix.load_state_dict(state["mix"])  # scores (mix_warmup) is the resumed run's own setting
