"""Deterministic maze generation for the quickstart env.

A task id ``<difficulty>-<n>`` always yields the same maze: a perfect maze
carved by a seeded depth-first search, with a few extra openings so that
several routes (and dead ends) exist, and start and goal placed so that the
shortest path lies in the difficulty's turn range.
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass

MOVES: dict[str, tuple[int, int]] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1)}

#: difficulty -> (cells per side, shortest-path range in moves, extra openings)
DIFFICULTIES: dict[str, tuple[int, tuple[int, int], int]] = {
    "open": (0, (5, 8), 0),  # a 5x5 room without inner walls: walking towards the goal always works
    "easy": (3, (5, 8), 1),
    "medium": (4, (8, 14), 2),
    "hard": (6, (14, 24), 4),
}

Cell = tuple[int, int]


@dataclass(frozen=True)
class Maze:
    """A grid of '#' walls and '.' floor with a start and a goal cell."""

    task_id: str
    grid: tuple[str, ...]
    start: Cell
    goal: Cell

    def is_open(self, cell: Cell) -> bool:
        r, c = cell
        return 0 <= r < len(self.grid) and 0 <= c < len(self.grid[0]) and self.grid[r][c] != "#"

    def open_moves(self, cell: Cell) -> list[str]:
        return [m for m, (dr, dc) in MOVES.items() if self.is_open((cell[0] + dr, cell[1] + dc))]

    def distances_to_goal(self) -> dict[Cell, int]:
        """Breadth-first distance of every reachable cell to the goal."""
        dist = {self.goal: 0}
        queue = deque([self.goal])
        while queue:
            cell = queue.popleft()
            for dr, dc in MOVES.values():
                nxt = (cell[0] + dr, cell[1] + dc)
                if self.is_open(nxt) and nxt not in dist:
                    dist[nxt] = dist[cell] + 1
                    queue.append(nxt)
        return dist


def task_seed(task_id: str) -> int:
    """A platform-independent integer seed for a task id."""
    value = 0
    for ch in task_id.encode("utf-8"):
        value = (value * 131 + ch) % (2**61 - 1)
    return value


def generate(task_id: str) -> Maze:
    """The maze of `task_id` (``easy-0``, ``medium-17``, ``hard-999``, ...)."""
    difficulty, _, number = task_id.partition("-")
    if difficulty not in DIFFICULTIES or not number.isdigit():
        raise ValueError(
            f"unknown maze task id {task_id!r}: ids look like '<difficulty>-<n>' with difficulty in "
            f"{sorted(DIFFICULTIES)} and n a non-negative integer"
        )
    cells, (lo, hi), extra = DIFFICULTIES[difficulty]
    rng = random.Random(task_seed(task_id))
    for _attempt in range(200):
        grid = _room(5) if cells == 0 else _carve(cells, extra, rng)
        maze = _place(task_id, grid, lo, hi, rng)
        if maze is not None:
            return maze
    raise RuntimeError(f"could not place start and goal for maze {task_id!r}")  # pragma: no cover


def _room(side: int) -> list[list[str]]:
    size = side + 2
    return [["#" if r in (0, size - 1) or c in (0, size - 1) else "." for c in range(size)] for r in range(size)]


def _carve(cells: int, extra: int, rng: random.Random) -> list[list[str]]:
    size = 2 * cells + 1
    grid = [["#"] * size for _ in range(size)]
    stack = [(0, 0)]
    seen = {(0, 0)}
    grid[1][1] = "."
    while stack:
        r, c = stack[-1]
        options = [(r + dr, c + dc) for dr, dc in MOVES.values()
                   if 0 <= r + dr < cells and 0 <= c + dc < cells and (r + dr, c + dc) not in seen]
        if not options:
            stack.pop()
            continue
        nr, nc = rng.choice(options)
        grid[r + nr + 1][c + nc + 1] = "."
        grid[2 * nr + 1][2 * nc + 1] = "."
        seen.add((nr, nc))
        stack.append((nr, nc))
    walls = [(r, c) for r in range(1, size - 1) for c in range(1, size - 1)
             if grid[r][c] == "#" and (r % 2) != (c % 2)]
    for r, c in rng.sample(walls, min(extra, len(walls))):
        grid[r][c] = "."
    return grid


def _place(task_id: str, grid: list[list[str]], lo: int, hi: int, rng: random.Random) -> Maze | None:
    rows = tuple("".join(row) for row in grid)
    floor = [(r, c) for r, row in enumerate(rows) for c, ch in enumerate(row) if ch == "."]
    goal = rng.choice(floor)
    dist = Maze(task_id, rows, goal, goal).distances_to_goal()
    starts = [cell for cell, d in dist.items() if lo <= d <= hi]
    if not starts:
        return None
    return Maze(task_id, rows, rng.choice(sorted(starts)), goal)
