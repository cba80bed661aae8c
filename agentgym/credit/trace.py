"""TRACE tree-aware advantages (docs/algorithms.md, section 2.6).

Tree layout on `Episode`s: a root rollout has no `parent_id`; a branch names its `parent_id` and
`branch_turn = k`, meaning it continues from the state after the parent's first k turns (its own
first turn has absolute index k). A branch may hold only its own turns (`Turn.index` starting at k)
or also copies of the k shared prefix turns (`Turn.index` starting at 0); see `shared_prefix`.

Nodes are the group's root, the branch points and the leaves. Leaf value = R; node value V(u) =
mean of its children's values; every turn of the segment on edge u -> v gets A = V(v) - V(u).
Without branching this equals Dr.GRPO (R_i - mean R).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from agentgym.credit import validate
from agentgym.credit.batch import TurnBatch
from agentgym.credit.errors import CreditInputError
from agentgym.credit.registry import register_estimator
from agentgym.credit.result import CreditResult
from agentgym.credit.stats import EPS, segment_stats
from agentgym.trajectory import Episode

ROOT = -1  #: episode index standing for a group's root node


@dataclass
class RolloutTree:
    """The trees of a batch: parent links, branch points and shared-prefix copies per episode.

    All lists are indexed by batch position. `node_of(e, k)` maps "the state after k turns of
    episode e" to its canonical node `(owner episode, k)`, or `(ROOT, 0)` for a group's root.
    """

    parent: list[int]  #: parent's batch index, or ROOT
    branch_turn: list[int]  #: k (0 for roots)
    n_copied: list[int]  #: leading turns that are copies of the shared prefix (0 or k)
    own: list[int]  #: turns the episode took itself (after the shared prefix)
    order: list[int] = field(default_factory=list)  #: episode indices, parents before children
    points: list[dict[int, list[int]]] = field(default_factory=list)  #: per owner: k -> child indices
    root_children: dict[int, list[int]] = field(default_factory=dict)  #: group code -> episodes starting at root

    @classmethod
    def build(cls, batch: TurnBatch, prefix_in_children: bool | None = None) -> RolloutTree:
        """Validate the parent links of `batch` and index its branch points."""
        eps = batch.episodes
        index = {ep.id: i for i, ep in enumerate(eps)}
        parent = [_parent_index(ep, index, eps, batch) for ep in eps]
        bt = [(ep.branch_turn or 0) if ep.parent_id else 0 for ep in eps]
        copied = [_copied_turns(ep, k, prefix_in_children) if p != ROOT else 0 for ep, k, p in zip(eps, bt, parent, strict=True)]
        own = [len(ep.turns) - c for ep, c in zip(eps, copied, strict=True)]
        tree = cls(parent=parent, branch_turn=bt, n_copied=copied, own=own, order=_topological(parent),
                   points=[{} for _ in eps])
        for e in tree.order:
            p = parent[e]
            if p != ROOT:
                limit = tree.length(p)
                if not 0 <= bt[e] <= limit:
                    raise CreditInputError(f"episode {eps[e].id} branches at turn {bt[e]}, but its parent "
                                           f"{eps[p].id} has only {limit} turns; branch_turn must be in [0, {limit}].")
            owner, k = tree.node_of(p, bt[e]) if p != ROOT else (ROOT, 0)
            if owner == ROOT:
                tree.root_children.setdefault(int(batch.group[e]), []).append(e)
            else:
                tree.points[owner].setdefault(k, []).append(e)
        return tree

    def length(self, e: int) -> int:
        """Absolute number of turns on episode e's path (shared prefix + own turns)."""
        return self.branch_turn[e] + self.own[e]

    def node_of(self, e: int, k: int) -> tuple[int, int]:
        """Canonical node of the state after k turns of episode e."""
        while self.parent[e] != ROOT and k <= self.branch_turn[e]:
            e = self.parent[e]
        return (ROOT, 0) if k == 0 and self.parent[e] == ROOT else (e, k)


def _parent_index(ep: Episode, index: dict[str, int], eps: tuple[Episode, ...], batch: TurnBatch) -> int:
    if not ep.parent_id:
        return ROOT
    if ep.parent_id not in index:
        raise CreditInputError(f"episode {ep.id} names parent {ep.parent_id}, which is not in the batch; "
                               "pass the whole tree (every ancestor of every branch) to 'trace'.")
    if ep.branch_turn is None:
        raise CreditInputError(f"episode {ep.id} has parent_id {ep.parent_id} but no branch_turn; the collector "
                               "must record the turn at which it forked.")
    p = index[ep.parent_id]
    if eps[p].group_id != ep.group_id:
        raise CreditInputError(f"episode {ep.id} (group {ep.group_id}) branches from {ep.parent_id} in group "
                               f"{eps[p].group_id}; a tree must stay inside one group.")
    return p


def _copied_turns(ep: Episode, k: int, prefix_in_children: bool | None) -> int:
    """How many leading turns of branch `ep` are copies of the k-turn shared prefix."""
    if prefix_in_children is None:
        turns = ep.turns
        prefix_in_children = k > 0 and len(turns) > k and turns[0].index == 0 and turns[k].index == k
    if prefix_in_children and len(ep.turns) < k:
        raise CreditInputError(f"branch {ep.id} should start with {k} copied prefix turns but has only "
                               f"{len(ep.turns)} turns; set prefix_in_children=False if it holds only its own turns.")
    return k if prefix_in_children else 0


def _topological(parent: list[int]) -> list[int]:
    """Episode indices ordered parents first; raises on cycles."""
    depth = [-1] * len(parent)
    for start in range(len(parent)):
        chain, seen, e = [], set(), start
        while e != ROOT and depth[e] < 0:
            if e in seen:
                raise CreditInputError("the parent_id links of the batch form a cycle; a rollout tree has none.")
            chain.append(e)
            seen.add(e)
            e = parent[e]
        d = 0 if e == ROOT else depth[e] + 1
        for node in reversed(chain):
            depth[node] = d
            d += 1
    return sorted(range(len(parent)), key=depth.__getitem__)


def tree_values(batch: TurnBatch, tree: RolloutTree) -> tuple[list[dict[int, float]], dict[int, float], list[float]]:
    """(V of each branch point per owner, V of each group root, value where each episode starts)."""
    node_v: list[dict[int, float]] = [{} for _ in batch.episodes]
    start_v = [0.0] * batch.n_episodes
    for e in reversed(tree.order):  # children before parents
        cont = float(batch.outcome[e])
        for k in sorted(tree.points[e], reverse=True):
            cont = _mean([cont, *(start_v[c] for c in tree.points[e][k])])
            node_v[e][k] = cont
        start_v[e] = cont
    root_v = {g: _mean([start_v[e] for e in kids]) for g, kids in tree.root_children.items()}
    return node_v, root_v, start_v


def _mean(values: list[float]) -> float:
    """Mean centred on the first value, so equal values give exactly that value."""
    ref = values[0]
    return ref + sum(v - ref for v in values) / len(values)


@register_estimator("trace", summary="tree advantages A = V(child node) - V(parent node) per segment",
                    needs=("Episode.parent_id / branch_turn (a rollout tree)",))
def trace(batch: TurnBatch, *, normalize_std: bool = False, require_tree: bool = True,
          shared_prefix: Literal["skip", "copy"] = "skip", prefix_in_children: bool | None = None,
          eps: float = EPS) -> CreditResult:
    """TRACE tree advantages.

    Inputs: outcomes R [E], parent links. Output: advantages [T] and `trained` [T] (False on
    shared-prefix copies with `shared_prefix="skip"`, which also get A = 0; "copy" gives copies the
    advantage of the original turn). `normalize_std` divides by the group's outcome std + eps.
    """
    validate.choice("trace", "shared_prefix", shared_prefix, ("skip", "copy"))
    validate.number("trace", "eps", eps, low=0.0)
    if require_tree and not any(ep.parent_id for ep in batch.episodes):
        raise CreditInputError("estimator 'trace' needs a rollout tree, but no episode has parent_id/branch_turn. "
                               "Collect branches with TraceAllocator.plan(...) through the collector's branching "
                               "hook, or pass require_tree=False to accept flat groups (advantages = Dr.GRPO).")
    tree = RolloutTree.build(batch, prefix_in_children)
    node_v, root_v, _ = tree_values(batch, tree)
    v_start = np.array([_start_value(tree, node_v, root_v, int(g), e) for e, g in enumerate(batch.group.tolist())])
    # episodes without branch points: every own turn gets R - V(start node)
    adv = np.repeat(batch.outcome - v_start, batch.lengths)
    trained = np.ones(batch.n_turns, dtype=bool)
    starts = batch.starts.tolist()
    for e in (e for e in range(batch.n_episodes) if node_v[e]):
        row0 = starts[e] + tree.n_copied[e] - tree.branch_turn[e]  # flat row of absolute turn 0 on e's path
        seg_start, v_prev = tree.branch_turn[e], v_start[e]
        for k_next, v_next in [*sorted(node_v[e].items()), (tree.length(e), float(batch.outcome[e]))]:
            adv[row0 + seg_start: row0 + k_next] = v_next - v_prev
            seg_start, v_prev = k_next, v_next
    _fill_copies(batch, tree, adv, trained, shared_prefix, starts)
    if normalize_std:
        stats = segment_stats(batch.outcome, batch.group, batch.n_groups)
        adv = adv / (stats.std[batch.group_of_turn] + eps)
    return CreditResult("trace", batch, adv, trained=trained)


def _start_value(tree: RolloutTree, node_v: list[dict[int, float]], root_v: dict[int, float], group: int,
                 e: int) -> float:
    """V of the node episode e starts from (its group's root, or its canonical branch point)."""
    p = tree.parent[e]
    owner, k = tree.node_of(p, tree.branch_turn[e]) if p != ROOT else (ROOT, 0)
    return root_v[group] if owner == ROOT else node_v[owner][k]


def _fill_copies(batch: TurnBatch, tree: RolloutTree, adv: np.ndarray, trained: np.ndarray, mode: str,
                 starts: list[int]) -> None:
    """Give copied prefix turns 0 and trained=False ("skip") or the original turn's advantage ("copy")."""
    for e in (e for e, n in enumerate(tree.n_copied) if n):
        for j in range(tree.n_copied[e]):
            row = starts[e] + j
            if mode == "skip":
                adv[row], trained[row] = 0.0, False
                continue
            anc = tree.parent[e]
            while j < tree.branch_turn[anc]:
                anc = tree.parent[anc]
            adv[row] = adv[starts[anc] + tree.n_copied[anc] - tree.branch_turn[anc] + j]
