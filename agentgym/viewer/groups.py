"""Group and tree layouts: episodes side by side with GiGPO anchor states, and branch trees.

An anchor state (GiGPO) is a state fingerprint that occurs in two or more
episodes of one group: the turns taken from it are compared with each other.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from agentgym.trajectory import Turn, first_difference

#: pale, distinguishable backgrounds for anchor states (cycled)
ANCHOR_COLOURS = ("#fde68a", "#bfdbfe", "#bbf7d0", "#fbcfe8", "#ddd6fe", "#fed7aa", "#a5f3fc", "#d9f99d",
                  "#fecaca", "#e9d5ff")


@dataclass(frozen=True)
class Anchor:
    """A state fingerprint shared by several episodes of a group."""

    fingerprint: str
    label: str  #: "A1", "A2", ... in order of first appearance
    colour: str
    episodes: int  #: how many episodes of the group pass through it
    visits: int  #: how many turns in the group start from it


def find_anchors(turns_by_episode: dict[str, list[dict[str, Any]]]) -> dict[str, Anchor]:
    """fingerprint -> Anchor for every non-empty fingerprint seen in at least two episodes."""
    episodes_with: Counter[str] = Counter()
    visits: Counter[str] = Counter()
    order: list[str] = []
    for turns in turns_by_episode.values():
        seen = set()
        for turn in turns:
            fp = turn["state_fingerprint"]
            if not fp:
                continue
            visits[fp] += 1
            if fp not in seen:
                seen.add(fp)
                episodes_with[fp] += 1
            if fp not in order:
                order.append(fp)
    anchors = {}
    for fp in order:
        if episodes_with[fp] >= 2:
            n = len(anchors)
            anchors[fp] = Anchor(fp, f"A{n + 1}", ANCHOR_COLOURS[n % len(ANCHOR_COLOURS)], episodes_with[fp],
                                 visits[fp])
    return anchors


@dataclass(frozen=True)
class StepGroup:
    """Turns that a step-level estimator (GiGPO) compared with each other in one update: same state."""

    update: int
    label: str  #: the anchor label of their state ("" when the state is not an anchor of this page)
    colour: str
    members: list[dict[str, Any]]  #: {episode_id, index, action_text, advantage, episode_part, step_part}


def step_groups(turns_by_episode: dict[str, list[dict[str, Any]]], credit: dict[str, list[dict[str, Any]]],
                anchors: dict[str, Anchor]) -> list[StepGroup]:
    """The stored step groups of more than one turn among these episodes, largest first."""
    by_key: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for episode_id, records in credit.items():
        turns = {t["index"]: t for t in turns_by_episode.get(episode_id, [])}
        for r in records:
            if r["dropped"] or r["step_group"] is None or (r["step_group_size"] or 0) < 2:
                continue
            turn = turns.get(r["index"], {})
            by_key.setdefault((r["update"], r["step_group"]), []).append({
                "episode_id": episode_id, "index": r["index"], "action_text": turn.get("action_text", ""),
                "fingerprint": turn.get("state_fingerprint", ""), "advantage": r["advantage"],
                "episode_part": r["episode_part"], "step_part": r["step_part"]})
    out = []
    for (update, _), members in by_key.items():
        if len(members) < 2:
            continue
        anchor = anchors.get(members[0]["fingerprint"])
        out.append(StepGroup(update, anchor.label if anchor else "", anchor.colour if anchor else "#eee",
                             sorted(members, key=lambda m: (m["episode_id"], m["index"]))))
    return sorted(out, key=lambda g: (-len(g.members), g.update, g.label))


@dataclass
class TreeNode:
    """One episode in a branch tree, with its children ordered by branch turn."""

    row: dict[str, Any]
    turns: list[dict[str, Any]]
    children: list[TreeNode] = field(default_factory=list)
    differs_at: int | None = None  #: first turn whose action differs from the parent's (None: same actions)

    @property
    def own_turns(self) -> list[dict[str, Any]]:
        """The turns this episode added after its branch point (all of them for the root)."""
        start = (self.row["branch_turn"] or 0) if self.row["parent_id"] else 0
        return [t for t in self.turns if t["index"] >= start]


def build_tree(root_id: str, rows: list[dict[str, Any]], turns: dict[str, list[dict[str, Any]]]) -> TreeNode | None:
    nodes = {r["id"]: TreeNode(r, turns.get(r["id"], [])) for r in rows}
    for node in nodes.values():
        parent = node.row["parent_id"]
        if parent in nodes and node.row["id"] != root_id:
            nodes[parent].children.append(node)
            node.differs_at = _first_different_action(nodes[parent].turns, node.turns)
    for node in nodes.values():
        node.children.sort(key=lambda n: (n.row["branch_turn"] or 0, n.row["created_at"]))
    return nodes.get(root_id)


def _first_different_action(parent: list[dict[str, Any]], child: list[dict[str, Any]]) -> int | None:
    """The first turn index where the child's action differs from the parent's, or one of them has ended.

    `agentgym.trajectory.first_difference` on the actions (the tree compares what the policies did).
    """
    found = first_difference([_turn(t) for t in parent], [_turn(t) for t in child], fields=("action_text",))
    return None if found is None else found.turn


def _turn(row: dict[str, Any]) -> Turn:
    return Turn(index=int(row["index"]), action_text=row["action_text"])
