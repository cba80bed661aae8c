"""The page as text: an accessibility-style tree with a `[bid]` on every element the agent can act on.

One line per node, indented by depth, in the BrowserGym convention::

    [12] textbox "Email" value="ann@example.com" required focused
    [13] button "Continue"
    StaticText "Your cart is empty."

Pruning (on by default) drops invisible nodes and nameless containers
(`generic`, `list`, ... with nothing to say), keeping every interactive
node and every piece of visible text, so small models see short pages. A
character cap then cuts the tail and says how much was cut. Unpruned trees
show every element, hidden ones marked ``hidden``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

#: roles shown even without a name when pruning (they structure the page for the reader)
_STRUCTURAL = {"heading", "dialog", "form", "table", "row", "navigation", "main"}


@dataclass(frozen=True)
class Node:
    """One element of the page snapshot (see snapshot.js)."""

    bid: str
    role: str
    name: str = ""
    value: str | None = None
    states: tuple[str, ...] = ()
    depth: int = 0
    interactive: bool = False
    visible: bool = True
    text: str = ""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Node:
        return cls(bid=str(data["bid"]), role=data["role"], name=data.get("name") or "", value=data.get("value"),
                   states=tuple(data.get("states") or ()), depth=int(data.get("depth", 0)),
                   interactive=bool(data.get("interactive")), visible=bool(data.get("visible", True)),
                   text=data.get("text") or "")


@dataclass(frozen=True)
class PageView:
    """What one observation shows: the tree plus page facts."""

    url: str
    title: str
    nodes: tuple[Node, ...]
    truncated: bool = False  #: the snapshot stopped at its node limit

    def find(self, role: str, name: str, *, visible_only: bool = True) -> Node | None:
        """The first node with this role and exactly this name (case- and space-insensitive).

        An empty `name` matches any name; ``role#n`` picks the n-th match (1-based).
        """
        role, _, nth = role.partition("#")
        want, skip = " ".join(name.split()).casefold(), int(nth or 1) - 1
        for node in self.nodes:
            if node.role == role and (not want or " ".join(node.name.split()).casefold() == want):
                if node.visible or not visible_only:
                    if skip == 0:
                        return node
                    skip -= 1
        return None

    def interactive_bids(self) -> list[Node]:
        """Visible interactive nodes, in page order."""
        return [n for n in self.nodes if n.interactive and n.visible and "disabled" not in n.states]


def _quote(text: str, limit: int = 200) -> str:
    text = text if len(text) <= limit else text[:limit] + "…"
    return json.dumps(text, ensure_ascii=False)


def node_line(node: Node, *, show_bid: bool) -> str:
    parts = [f"[{node.bid}] {node.role}" if show_bid else node.role]
    if node.name:
        parts.append(_quote(node.name))
    if node.value is not None and node.role != "option":
        parts.append(f"value={_quote(node.value)}")
    parts.extend(node.states)
    if not node.visible:
        parts.append("hidden")
    return " ".join(parts)


def _keep(node: Node, prune: bool) -> bool:
    if not prune:
        return True
    if not node.visible or node.role == "LabelText":  # a label is its control's name already
        return False
    return node.interactive or bool(node.name) or node.role in _STRUCTURAL or node.role == "option"


def tree_lines(nodes: tuple[Node, ...], *, prune: bool) -> list[str]:
    """The indented lines of the tree (pruned or not).

    An element's own text shows as ``StaticText`` under it; when pruning hid
    the element itself, its text line carries the element's bid, so any text
    on the page can still be clicked.
    """
    lines: list[str] = []
    for node in nodes:
        indent = "  " * min(node.depth, 12) if not prune else ("  " if node.role == "option" else "")
        kept = _keep(node, prune)
        if kept:
            lines.append(indent + node_line(node, show_bid=node.role != "option"))
        if node.text and (not prune or node.visible) and node.text not in node.name \
                and not (prune and node.role == "LabelText"):
            text = f"StaticText {_quote(node.text, 300)}"
            lines.append(indent + ("  " + text if kept else f"[{node.bid}] {text}"))
    return lines


def render(view: PageView, *, prune: bool = True, max_chars: int = 6000, header: str = "",
           error: str | None = None) -> str:
    """The observation text: header (task), URL, title, last error, then the tree cut at `max_chars`."""
    head = [header] if header else []
    head += [f"URL: {view.url}", f"Title: {view.title}"]
    if error:
        head.append(f"Last action error: {error}")
    head.append("")
    lines = tree_lines(view.nodes, prune=prune)
    budget = max_chars - sum(len(h) + 1 for h in head)
    kept, used = [], 0
    for i, line in enumerate(lines):
        if used + len(line) + 1 > budget:
            kept.append(f"... ({len(lines) - i} more lines cut at {max_chars} characters; scroll or narrow the page)")
            break
        kept.append(line)
        used += len(line) + 1
    if view.truncated:
        kept.append("... (page has more elements than the snapshot limit)")
    return "\n".join(head + kept)
