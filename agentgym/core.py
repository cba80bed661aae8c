"""The agentgym environment contract.

An `AgentEnv` is a `gymnasium.Env` whose observations and actions are text.
One episode is a conversation: `reset` gives the first observation (the task),
each `step` takes the model's full reply for a turn and answers with the next
observation, a reward and whether the episode ended.

What the contract adds to Gymnasium, and why:

- `state_fingerprint()` names the state the agent just observed so that GiGPO
  can group identical states across the episodes of a group. The default
  hashes the normalised last observation; override it when observations carry
  text (timestamps, counters, error messages) that is not part of the state.
- `snapshot()` / `restore(token)` fork an episode cheaply for tree rollouts.
  Envs without them are branched by replaying the action prefix from the same
  seed and task, which needs `deterministic = True`.
- `areset` / `astep` let the collector keep hundreds of episodes in flight.
  The defaults run the sync methods in a worker thread.
- `thread_safe` says whether separate instances may run in threads of one
  process. It is False unless an env class declares it: the collector then
  steps each instance in its own worker process (`agentgym.runtime`), since
  most real envs (text games, simulators) share global state.
- `task_ids()` lists the tasks; `reset(options={"task_id": ...})` selects one.
  Splits (train / eval / test) come from `agentgym.splits.task_ids(env, split)`:
  an env that defines `task_ids(self, split=None)` states its own, the others
  get a stable hash split (`split_fractions` sets the shares).
- `solver_action()` is the optimal next action where the env has a solver, for
  tests, demonstrations and warm-start data.
- A malformed action is not an exception: the env answers with an error
  observation (see `agentgym.toolcalls.error_observation`), sets
  `info["error_kind"]`, and the episode goes on. `action_format` declares
  whether actions are parsed (``"tool_calls"``: tool calls or a command
  grammar, so a reply can be malformed) or ``"free_text"`` (a text adventure
  answers any string in its own words; no reply is malformed).
- A broken backend (database gone, tool server crashed, container dead) is
  the env's fault, not the model's: raise `agentgym.errors.EnvInfraError`.
  The collector ends that episode as truncated with ``failure="infra"`` and
  the turn is not marked invalid.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
from collections.abc import Sequence
from typing import Any, ClassVar, Literal, SupportsFloat

import gymnasium as gym

from agentgym.errors import SnapshotUnsupportedError
from agentgym.spaces import UnicodeText

Observation = str
Action = str
Info = dict[str, Any]
StepResult = tuple[Observation, SupportsFloat, bool, bool, Info]
ResetResult = tuple[Observation, Info]
Message = dict[str, Any]
ActionFormat = Literal["tool_calls", "free_text"]
ACTION_FORMATS: tuple[str, ...] = ("tool_calls", "free_text")


def normalise_text(text: str) -> str:
    """Whitespace-collapsed text, the input of the default state fingerprint."""
    return " ".join(text.split())


def fingerprint_text(text: str) -> str:
    """A stable 16-hex-digit key of `text` after whitespace normalisation."""
    return hashlib.sha256(normalise_text(text).encode("utf-8")).hexdigest()[:16]


def _remember_observation(method):
    """Wrap a subclass's reset/step so the base class sees the last observation."""

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        result = method(self, *args, **kwargs)
        if isinstance(result, tuple) and result and isinstance(result[0], str):
            self._last_observation = result[0]
        return result

    wrapper.__agentgym_wrapped__ = True  # type: ignore[attr-defined]
    return wrapper


class AgentEnv(gym.Env[str, str]):
    """Base class of every agentgym environment (a text-in, text-out `gymnasium.Env`)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}
    #: Same seed, task and actions give the same observations and rewards.
    deterministic: ClassVar[bool] = True
    #: Separate instances may be stepped from threads of one process (else each runs in a worker process).
    thread_safe: ClassVar[bool] = False
    #: How actions are read: "tool_calls" (parsed; malformed replies set info["error_kind"]) or "free_text".
    action_format: ClassVar[ActionFormat] = "tool_calls"
    #: The system prompt the collector puts before the first observation.
    system_prompt: str = ""
    #: Shares of the default hash split of `task_ids()` ({"train": .8, "eval": .1, "test": .1} when None);
    #: ignored by envs whose `task_ids` takes a `split` argument (they define their own splits).
    split_fractions: ClassVar[dict[str, float] | None] = None

    observation_space = UnicodeText()
    action_space = UnicodeText()

    _last_observation: str = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in ("reset", "step"):
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "__agentgym_wrapped__", False):
                setattr(cls, name, _remember_observation(method))

    def __init__(self, render_mode: str | None = None):
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(
                f"render_mode={render_mode!r} is not supported; choose one of {self.metadata['render_modes']}"
            )
        self.render_mode = render_mode

    # ---- tasks -----------------------------------------------------------
    def task_ids(self) -> Sequence[str]:
        """Ids of the tasks this env can pose, for `reset(options={"task_id": ...})`.

        Override as ``task_ids(self, split=None)`` to define the env's own train/eval/test splits;
        read splits through `agentgym.splits.task_ids(env, split)`, which falls back to a hash split.
        """
        return []

    def choose_task(self, options: dict[str, Any] | None, task_ids: Sequence[str]) -> str:
        """The task of this reset: ``options["task_id"]`` when given, else one drawn with the seeded `np_random`.

        Call it after ``super().reset(seed=seed)``; an unknown id raises `ValueError` naming an example.
        """
        if not task_ids:
            raise ValueError(f"{type(self).__name__} has no tasks to choose from")
        task_id = (options or {}).get("task_id")
        if task_id is None:
            return task_ids[int(self.np_random.integers(len(task_ids)))]
        if task_id not in task_ids:
            raise ValueError(f"unknown task id {task_id!r} for {type(self).__name__}; see task_ids() "
                             f"(e.g. {task_ids[0]!r})")
        return task_id

    def tools(self) -> list[dict[str, Any]]:
        """OpenAI-style tool schemas the env offers; chat templates render them into the prompt."""
        return []

    # ---- state -----------------------------------------------------------
    @property
    def last_observation(self) -> str:
        """The observation most recently returned by `reset` or `step`."""
        return self._last_observation

    def state_fingerprint(self) -> str:
        """A stable key of the state the agent just observed (default: hash of the observation)."""
        return fingerprint_text(self._last_observation)

    @property
    def supports_snapshot(self) -> bool:
        """Whether `snapshot`/`restore` are implemented."""
        return type(self).snapshot is not AgentEnv.snapshot

    def snapshot(self) -> Any:
        """An opaque token from which `restore` rebuilds the current state."""
        raise SnapshotUnsupportedError(
            f"{type(self).__name__} has no snapshot(); branch it by replaying the action prefix instead"
        )

    def restore(self, token: Any) -> Observation:
        """Return the env to the state of `token` and give the observation of that state."""
        raise SnapshotUnsupportedError(
            f"{type(self).__name__} has no restore(); branch it by replaying the action prefix instead"
        )

    # ---- solver ----------------------------------------------------------
    @property
    def has_solver(self) -> bool:
        """Whether `solver_action` is implemented."""
        return type(self).solver_action is not AgentEnv.solver_action

    def solver_action(self) -> Action:
        """The optimal next action from the current state (envs with a built-in solver)."""
        raise NotImplementedError(f"{type(self).__name__} has no built-in solver")

    def valid_actions(self) -> list[Action] | None:
        """A finite list of well-formed actions from the current state, if the env has one.

        The `random` policy samples from it; envs without a finite action set return None.
        """
        return None

    # ---- async twins -----------------------------------------------------
    async def areset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> ResetResult:
        """`reset` without blocking the event loop (default: a worker thread)."""
        return await asyncio.to_thread(self.reset, seed=seed, options=options)

    async def astep(self, action: Action) -> StepResult:
        """`step` without blocking the event loop (default: a worker thread)."""
        return await asyncio.to_thread(self.step, action)

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_observation
        return None
