"""Deterministic key-and-door layouts: two rooms, a locked door between them, the key in the first room.

A task id ``<difficulty>-<n>`` always yields the same layout. The start and the key lie in the left
room, the goal in the right room; the wall between the rooms has one door, which opens only for an
agent carrying the key. Harder levels are wider, put U-shaped walls into the rooms (pockets that
are dead ends) and ask for longer shortest solutions. A breadth-first search over (cell, has key)
gives the exact distance to the goal from every state: the solver.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

from agentgym.envs.maze.generate import MOVES, task_seed

Cell = tuple[int, int]
State = tuple[Cell, bool]  #: (cell, carrying the key)


@dataclass(frozen=True)
class Level:
    """One difficulty: room size, inner wall stubs, the shortest-solution range and the turn limit."""

    rows: int
    left: int  #: columns of the left room (start and key)
    right: int  #: columns of the right room (goal)
    stubs: int  #: inner wall segments (dead-end pockets)
    shortest: tuple[int, int]  #: moves of the optimal solution, inclusive range
    max_turns: int


DIFFICULTIES: dict[str, Level] = {
    "easy": Level(rows=5, left=5, right=3, stubs=0, shortest=(10, 14), max_turns=24),
    "medium": Level(rows=6, left=6, right=5, stubs=2, shortest=(13, 18), max_turns=30),
    "hard": Level(rows=7, left=8, right=6, stubs=4, shortest=(17, 24), max_turns=40),
}


@dataclass(frozen=True)
class Layout:
    """A grid of '#' walls and '.' floor, the door cell ('D' in the grid), the key, the start and the goal."""

    task_id: str
    grid: tuple[str, ...]
    start: Cell
    key: Cell
    door: Cell
    goal: Cell

    def passable(self, cell: Cell, has_key: bool) -> bool:
        r, c = cell
        if not (0 <= r < len(self.grid) and 0 <= c < len(self.grid[0])):
            return False
        ch = self.grid[r][c]
        return ch == "." or (ch == "D" and has_key)

    def step(self, state: State, move: str) -> State:
        """The state after `move` (the same state when a wall or the locked door is in the way)."""
        (r, c), has_key = state
        dr, dc = MOVES[move]
        target = (r + dr, c + dc)
        if not self.passable(target, has_key):
            return state
        return target, has_key or target == self.key

    def distances(self) -> dict[State, int]:
        """Moves to the goal from every state that can still reach it (backward BFS over (cell, key))."""
        states = [((r, c), k) for r, row in enumerate(self.grid) for c, ch in enumerate(row) if ch != "#"
                  for k in (False, True)]
        reverse: dict[State, list[State]] = {}
        for s in states:
            for move in MOVES:
                nxt = self.step(s, move)
                if nxt != s:
                    reverse.setdefault(nxt, []).append(s)
        dist: dict[State, int] = {}
        queue: deque[State] = deque()
        for k in (False, True):
            dist[(self.goal, k)] = 0
            queue.append((self.goal, k))
        while queue:
            s = queue.popleft()
            for prev in reverse.get(s, []):
                if prev not in dist and prev[0] != self.goal:
                    dist[prev] = dist[s] + 1
                    queue.append(prev)
        return dist


def generate(task_id: str) -> Layout:
    """The layout of `task_id` (``easy-0``, ``medium-17``, ``hard-999``, ...)."""
    difficulty, _, number = task_id.partition("-")
    if difficulty not in DIFFICULTIES or not number.isdigit():
        raise ValueError(f"unknown KeyDoor task id {task_id!r}: ids look like '<difficulty>-<n>' with difficulty "
                         f"in {sorted(DIFFICULTIES)} and n a non-negative integer")
    level = DIFFICULTIES[difficulty]
    rng = random.Random(task_seed("keydoor:" + task_id))
    for _attempt in range(500):
        layout = _try(task_id, level, rng)
        if layout is not None:
            return layout
    raise RuntimeError(f"could not lay out KeyDoor task {task_id!r}")  # pragma: no cover


def _try(task_id: str, level: Level, rng: random.Random) -> Layout | None:
    width = level.left + level.right + 3  # outer walls and the dividing wall
    wall_col = level.left + 1
    grid = [["#" if r in (0, level.rows + 1) or c in (0, width - 1, wall_col) else "." for c in range(width)]
            for r in range(level.rows + 2)]
    door = (rng.randrange(1, level.rows + 1), wall_col)
    grid[door[0]][door[1]] = "D"
    for _ in range(level.stubs):
        _stub(grid, rng, wall_col)
    left = [(r, c) for r in range(1, level.rows + 1) for c in range(1, wall_col) if grid[r][c] == "."]
    right = [(r, c) for r in range(1, level.rows + 1) for c in range(wall_col + 1, width - 1) if grid[r][c] == "."]
    start, key = rng.sample(left, 2)
    goal = rng.choice(right)
    layout = Layout(task_id, tuple("".join(row) for row in grid), start, key, door, goal)
    best = layout.distances().get((start, False))
    lo, hi = level.shortest
    if best is None or not lo <= best <= hi:
        return None
    return layout


#: a U of wall around a two-cell pocket, open at the bottom (rotated at random): a dead end
_POCKET = ("###", "#.#", "#.#")


def _stub(grid: list[list[str]], rng: random.Random, wall_col: int) -> None:
    """A dead-end pocket inside a room, clear of the outer walls and the door's column."""
    rows, cols = len(grid) - 2, len(grid[0]) - 2
    shape = [list(row) for row in _POCKET]
    for _ in range(rng.randrange(4)):  # rotate a quarter turn
        shape = [list(row) for row in zip(*shape[::-1], strict=True)]
    r, c = rng.randrange(2, rows - 1), rng.randrange(2, cols - 1)
    if any(abs(cc - wall_col) <= 1 for cc in range(c, c + 3)) or r + 2 > rows or c + 2 > cols:
        return
    if any(grid[rr][cc] != "." for rr in range(r - 1, r + 4) for cc in range(c - 1, c + 4)):
        return  # touching another wall could seal the pocket
    for dr, row in enumerate(shape):
        for dc, ch in enumerate(row):
            if ch == "#":
                grid[r + dr][c + dc] = "#"
