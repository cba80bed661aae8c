"""KeyDoor: fetch the key, open the door, reach the goal. A long-horizon env where turn credit matters.

Two rooms split by a wall with one locked door. The agent starts in the left room, where the key
lies; the goal is in the right room. Walking onto the key picks it up; the door lets only a key
holder through. The reward is sparse (1.0 at the goal, 0 otherwise) and the turn limit leaves some
slack but not much, so an early mistake (heading for the goal and skipping the key, wandering into
a pocket) is punished only at the end of the episode, 10-30 turns later. Cells recur across the
rollouts of one task (GiGPO's anchor states) and within an episode (back-tracking).

Difficulty levels (``easy``, ``medium``, ``hard``, or ``mixed``) set the room sizes, the number
of inner wall stubs (dead-end pockets), the range of the shortest solution (10-14, 13-18, 17-24
moves) and the default turn limit (24, 30, 40). Each level has `num_tasks` layouts (task ids
``<level>-<n>``). A breadth-first search over (cell, has key) is the solver.

The observation is short text a small model can read: the event, then where the key (until picked
up), the door and the goal lie relative to the agent, and which moves are open::

    Moved up. Key: 1 up, 2 left. Door: 2 down, 3 right. Goal: 3 down, 6 right. Open: up, left, down.

Actions are the Maze moves (``up``, ``down``, ``left``, ``right`` or a ``move`` tool call).
"""

from __future__ import annotations

from typing import Any

from agentgym.envs.keydoor.generate import DIFFICULTIES, Cell, Layout, State, generate
from agentgym.envs.maze.env import MOVE_TOOL, parse_move
from agentgym.envs.maze.generate import MOVES

from agentgym.core import AgentEnv
from agentgym.errors import MalformedActionError
from agentgym.toolcalls import error_observation


def offset(frm: Cell, to: Cell) -> str:
    """'2 down, 3 right' from `frm` to `to` ('here' when they are the same cell)."""
    dr, dc = to[0] - frm[0], to[1] - frm[1]
    parts = ([f"{abs(dr)} {'down' if dr > 0 else 'up'}"] if dr else []) + (
        [f"{abs(dc)} {'right' if dc > 0 else 'left'}"] if dc else [])
    return ", ".join(parts) or "here"


class KeyDoorEnv(AgentEnv):
    """Key, door, goal; see the module docstring."""

    #: instances share nothing unguarded: the collector may step them in threads of one process
    thread_safe = True

    system_prompt = ("Pick up the key, go through the door, reach the goal. Each turn, reply with one move: "
                     "up, down, left or right.")

    def __init__(self, difficulty: str = "easy", num_tasks: int = 1000, max_turns: int | None = None,
                 view: str = "local", render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        if difficulty not in (*DIFFICULTIES, "mixed"):
            raise ValueError(f"difficulty must be one of {sorted(DIFFICULTIES)} or 'mixed', got {difficulty!r}")
        if view not in ("local", "grid"):
            raise ValueError(f"view must be 'local' (short state text) or 'grid' (rendered map), got {view!r}")
        if num_tasks < 1 or (max_turns is not None and max_turns < 1):
            raise ValueError(f"num_tasks and max_turns must be >= 1, got {num_tasks} and {max_turns}")
        self.difficulty, self.num_tasks, self.view = difficulty, num_tasks, view
        self._levels = list(DIFFICULTIES) if difficulty == "mixed" else [difficulty]
        self.max_turns = max_turns if max_turns is not None else max(DIFFICULTIES[lv].max_turns for lv in self._levels)
        self._layout: Layout | None = None
        self._state: State = ((0, 0), False)
        self._turn = 0
        self._done = False
        self._dist: dict[State, int] = {}

    # ---- tasks -----------------------------------------------------------
    def task_ids(self) -> list[str]:
        return [f"{level}-{n}" for level in self._levels for n in range(self.num_tasks)]

    def tools(self) -> list[dict[str, Any]]:
        return [MOVE_TOOL]

    def valid_actions(self) -> list[str]:
        return list(MOVES)

    # ---- gymnasium API ---------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        task_id = (options or {}).get("task_id")
        if task_id is None:
            level = self._levels[int(self.np_random.integers(len(self._levels)))]
            task_id = f"{level}-{int(self.np_random.integers(self.num_tasks))}"
        self._load(str(task_id))
        assert self._layout is not None
        self._state, self._turn, self._done = (self._layout.start, False), 0, False
        info = {"task_id": self._layout.task_id, "optimal_turns": self._dist[self._state]}
        return self._describe("Start."), info

    def step(self, action: str):
        if self._layout is None:
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
        info["move"] = move
        before = self._state
        self._state = self._layout.step(before, move)
        cell, has_key = self._state
        if cell == self._layout.goal:
            self._done = True
            return "Goal reached!", 1.0, True, False, info
        if self._state == before:
            dr, dc = MOVES[move]
            blocked = (before[0][0] + dr, before[0][1] + dc) == self._layout.door
            return self._finish(self._describe(f"The door {move} is locked." if blocked else f"Wall {move}."), info)
        event = "Picked up the key." if has_key and not before[1] else f"Moved {move}."
        return self._finish(self._describe(event), info)

    def _finish(self, observation: str, info: dict[str, Any]):
        truncated = self._turn >= self.max_turns
        if truncated:
            self._done = True
            info["truncation_reason"] = f"turn limit of {self.max_turns} reached"
        return observation, 0.0, False, truncated, info

    def _describe(self, event: str) -> str:
        assert self._layout is not None
        cell, has_key = self._state
        moves = ", ".join(m for m in MOVES if self._layout.step(self._state, m) != self._state)
        if self.view == "grid":
            return f"{event}\n{self.render_grid()}\nOpen moves: {moves or 'none'}."
        key = "Key: carried." if has_key else f"Key: {offset(cell, self._layout.key)}."
        return (f"{event} {key} Door: {offset(cell, self._layout.door)}. Goal: {offset(cell, self._layout.goal)}. "
                f"Open: {moves or 'none'}.")

    def render_grid(self) -> str:
        """The map: '#' wall, 'D' door, 'K' key (until picked up), 'G' goal, 'A' the agent."""
        assert self._layout is not None
        rows = [list(row) for row in self._layout.grid]
        (r, c), has_key = self._state
        if not has_key:
            rows[self._layout.key[0]][self._layout.key[1]] = "K"
        rows[self._layout.goal[0]][self._layout.goal[1]] = "G"
        rows[r][c] = "A"
        return "\n".join("".join(row) for row in rows)

    def _load(self, task_id: str) -> None:
        if self._layout is None or self._layout.task_id != task_id:
            self._layout = generate(task_id)
            self._dist = self._layout.distances()

    # ---- agentgym extras -------------------------------------------------
    def state_fingerprint(self) -> str:
        """The agent's cell and whether it carries the key (the event text is not state)."""
        if self._layout is None:
            return ""
        (r, c), has_key = self._state
        return f"{self._layout.task_id}@{r},{c}{'+key' if has_key else ''}" + ("#done" if self._done else "")

    def snapshot(self) -> tuple[str, Cell, bool, int, bool, str]:
        assert self._layout is not None, "call reset() before snapshot()"
        return (self._layout.task_id, self._state[0], self._state[1], self._turn, self._done, self._last_observation)

    def restore(self, token: tuple[str, Cell, bool, int, bool, str]) -> str:
        task_id, cell, has_key, turn, done, observation = token
        self._load(task_id)
        self._state, self._turn, self._done = (tuple(cell), bool(has_key)), turn, done
        self._last_observation = observation
        return observation

    def solver_action(self) -> str:
        """A move that lowers the distance to the goal (over (cell, has key)) by one."""
        assert self._layout is not None, "call reset() before solver_action()"
        here = self._dist.get(self._state)
        if here is None or here == 0:
            raise RuntimeError("no move leads to the goal from here" if here is None else "already at the goal")
        for move in MOVES:
            if self._dist.get(self._layout.step(self._state, move)) == here - 1:
                return move
        raise RuntimeError("no move lowers the distance to the goal")  # pragma: no cover
