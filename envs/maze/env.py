"""Maze: the quickstart env. Walk from the start to the goal on a small grid.

The default observation is a short text of the local state (where the goal
lies relative to the agent, and which moves are open): small models learn from
it, while a rendered map (``view="grid"``) is there for people.

Deterministic, sparse terminal reward (1.0 on reaching the goal, 0 otherwise),
5 to 30 turns, thousands of task variants in three difficulty levels, and the
same states recur across the episodes of one task (the agent's cell), so
GiGPO's anchor-state grouping has something to group. A breadth-first solver
gives the optimal action from any state.

An action is one move: a bare word (``up``, ``down``, ``left``, ``right``; also
``north``/``south``/``west``/``east``) or a tool call
``{"name": "move", "arguments": {"direction": "up"}}``. Anything else gets an
error observation and the episode goes on.
"""

from __future__ import annotations

import re
from typing import Any

from agentgym.envs.maze.generate import DIFFICULTIES, MOVES, Cell, Maze, generate

from agentgym.core import AgentEnv
from agentgym.errors import MalformedActionError
from agentgym.toolcalls import error_observation, parse_tool_calls

_ALIASES = {"north": "up", "south": "down", "west": "left", "east": "right",
            "u": "up", "d": "down", "l": "left", "r": "right"}
_WORD = re.compile(r"[a-z]+")

MOVE_TOOL = {
    "type": "function",
    "function": {
        "name": "move",
        "description": "Move one cell in a direction.",
        "parameters": {
            "type": "object",
            "properties": {"direction": {"type": "string", "enum": list(MOVES)}},
            "required": ["direction"],
        },
    },
}


def parse_move(text: str) -> str:
    """The move named by the model's text, or `MalformedActionError` saying what to write."""
    calls = parse_tool_calls(text)
    if calls:
        call = calls[-1]
        if call.name != "move":
            raise MalformedActionError(f"unknown tool '{call.name}'", kind="unknown_tool",
                                       hint="the only tool is move(direction)")
        text = str(call.arguments.get("direction", ""))
    words = _WORD.findall(text.lower())
    moves = [_ALIASES.get(w, w) for w in words if _ALIASES.get(w, w) in MOVES]
    if not moves:
        shown = text.strip()[:40] or "(empty)"
        raise MalformedActionError(f"'{shown}' is not a move",
                                   hint="reply with one of: up, down, left, right")
    return moves[-1]


class MazeEnv(AgentEnv):
    """Grid navigation with a sparse reward; see the module docstring."""

    #: instances share nothing: the collector may step them in threads of one process
    thread_safe = True

    system_prompt = "You walk through a maze to its goal. Each turn, reply with one move: up, down, left or right."

    def __init__(self, difficulty: str = "easy", num_tasks: int = 1000, max_turns: int = 30,
                 view: str = "local", render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        if view not in ("local", "grid"):
            raise ValueError(f"view must be 'local' (short state text) or 'grid' (rendered map), got {view!r}")
        self.view = view
        if difficulty not in (*DIFFICULTIES, "mixed"):
            raise ValueError(f"difficulty must be one of {sorted(DIFFICULTIES)} or 'mixed', got {difficulty!r}")
        if num_tasks < 1 or max_turns < 1:
            raise ValueError(f"num_tasks and max_turns must be >= 1, got {num_tasks} and {max_turns}")
        self.difficulty = difficulty
        self.num_tasks = num_tasks
        self.max_turns = max_turns
        self._levels = list(DIFFICULTIES) if difficulty == "mixed" else [difficulty]
        self._maze: Maze | None = None
        self._pos: Cell = (0, 0)
        self._turn = 0
        self._done = False
        self._dist: dict[Cell, int] = {}

    # ---- tasks -----------------------------------------------------------
    def task_ids(self) -> list[str]:
        return [f"{level}-{n}" for level in self._levels for n in range(self.num_tasks)]

    def tools(self) -> list[dict[str, Any]]:
        return [MOVE_TOOL]

    # ---- gymnasium API ---------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        task_id = (options or {}).get("task_id")
        if task_id is None:
            level = self._levels[int(self.np_random.integers(len(self._levels)))]
            task_id = f"{level}-{int(self.np_random.integers(self.num_tasks))}"
        self._maze = generate(str(task_id))
        self._dist = self._maze.distances_to_goal()
        self._pos, self._turn, self._done = self._maze.start, 0, False
        info = {"task_id": self._maze.task_id, "optimal_turns": self._dist[self._pos]}
        return self._describe("Start."), info

    def step(self, action: str):
        if self._maze is None:
            raise RuntimeError("call reset() before step()")
        if self._done:
            raise RuntimeError("the episode has ended; call reset() to start a new one")
        self._turn += 1
        info: dict[str, Any] = {"turn": self._turn}
        try:
            move = parse_move(action)
        except MalformedActionError as exc:
            info.update(error_kind=exc.kind, error=str(exc))
            return self._finish(error_observation(exc), info)
        dr, dc = MOVES[move]
        target = (self._pos[0] + dr, self._pos[1] + dc)
        info["move"] = move
        if not self._maze.is_open(target):
            return self._finish(self._describe(f"Wall {move}."), info)
        self._pos = target
        if self._pos == self._maze.goal:
            self._done = True
            return "Goal reached!", 1.0, True, False, info
        return self._finish(self._describe(f"Moved {move}."), info)

    def _finish(self, observation: str, info: dict[str, Any]):
        truncated = self._turn >= self.max_turns
        if truncated:
            self._done = True
            info["truncation_reason"] = f"turn limit of {self.max_turns} reached"
        return observation, 0.0, False, truncated, info

    def _describe(self, event: str) -> str:
        assert self._maze is not None
        moves = ", ".join(self._maze.open_moves(self._pos))
        if self.view == "local":
            return f"{event} Goal: {self._goal_offset()}. Open: {moves}."
        rows = []
        for r, row in enumerate(self._maze.grid):
            chars = list(row)
            if r == self._maze.goal[0]:
                chars[self._maze.goal[1]] = "G"
            if r == self._pos[0]:
                chars[self._pos[1]] = "A"
            rows.append("".join(chars))
        return f"{event}\n" + "\n".join(rows) + f"\nOpen moves: {moves}."

    def _goal_offset(self) -> str:
        assert self._maze is not None
        dr, dc = self._maze.goal[0] - self._pos[0], self._maze.goal[1] - self._pos[1]
        parts = []
        if dr:
            parts.append(f"{abs(dr)} {'down' if dr > 0 else 'up'}")
        if dc:
            parts.append(f"{abs(dc)} {'right' if dc > 0 else 'left'}")
        return ", ".join(parts)

    # ---- agentgym extras -------------------------------------------------
    def state_fingerprint(self) -> str:
        """The agent's cell in this maze (the event line of the observation is not state)."""
        task = self._maze.task_id if self._maze else ""
        return f"{task}@{self._pos[0]},{self._pos[1]}" + ("#done" if self._done else "")

    def snapshot(self) -> tuple[str, Cell, int, bool, str]:
        assert self._maze is not None, "call reset() before snapshot()"
        return (self._maze.task_id, self._pos, self._turn, self._done, self._last_observation)

    def restore(self, token: tuple[str, Cell, int, bool, str]) -> str:
        task_id, pos, turn, done, observation = token
        if self._maze is None or self._maze.task_id != task_id:
            self._maze = generate(task_id)
            self._dist = self._maze.distances_to_goal()
        self._pos, self._turn, self._done = tuple(pos), turn, done
        self._last_observation = observation
        return observation

    def solver_action(self) -> str:
        """A move that lowers the distance to the goal by one."""
        assert self._maze is not None, "call reset() before solver_action()"
        here = self._dist[self._pos]
        for move, (dr, dc) in MOVES.items():
            if self._dist.get((self._pos[0] + dr, self._pos[1] + dc), here) == here - 1:
                return move
        raise RuntimeError("already at the goal")

    def valid_actions(self) -> list[str]:
        return list(MOVES)
