"""What a run needs to know about its env, learned by making one instance before any model is built.

`agentgym train` calls `inspect_env` right after the config loads: an unknown env id (with the
closest registered ids) or arguments the env's constructor rejects stop the run there, not after
the model was built and the warm start ran. The facts it returns (the env's own turn limit, its
task splits, the longest well-formed action) are then used by the trainer, so SFT, RL and
evaluation agree on one turn limit and one held-out split.

    facts = inspect_env("Maze-v0", {"difficulty": "open"})
    facts.turn_limit, len(facts.splits["eval"]), facts.longest_actions
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentgym.core import AgentEnv
from agentgym.errors import ConfigError, RegistrationError, UnknownEnvError
from agentgym.splits import SPLITS, task_ids

#: How many tasks are reset to collect the env's action vocabulary (`valid_actions()` after reset).
_VOCAB_PROBES = 4


@dataclass(frozen=True)
class EnvFacts:
    """The env of a run, as one made instance describes it."""

    env_id: str  #: canonical registered id
    env_kwargs: dict[str, Any]  #: the arguments the env was made with
    turn_limit: int | None  #: the env's own turn limit (spec, else instance attribute); None: not stated
    splits: dict[str, list[str]] = field(default_factory=dict)  #: "train"/"eval"/"test" -> task ids
    all_tasks: int = 0  #: len(task_ids())
    has_solver: bool = False  #: the env implements solver_action (SFT warm start possible)
    longest_actions: tuple[str, ...] = ()  #: the longest few texts of valid_actions() seen after resets


def inspect_env(env_id: str, env_kwargs: dict[str, Any] | None = None) -> EnvFacts:
    """Make one instance of `env_id` and read its facts; every problem becomes a `ConfigError`."""
    from agentgym.registration import make, registry, turn_limit

    kwargs = dict(env_kwargs or {})
    try:
        canonical = registry.canonical(env_id)
    except (UnknownEnvError, RegistrationError) as exc:
        raise ConfigError(f"env: {exc}") from None
    try:
        env = make(canonical, **kwargs)
    except ConfigError as exc:
        raise ConfigError(f"env_kwargs: {exc}. Check the env's constructor arguments (its docstring, or "
                          f"`agentgym envs list --json`), or pass --env-kwargs '{{}}'") from None
    except Exception as exc:
        raise ConfigError(f"env: making '{canonical}' with arguments {kwargs} raised "
                          f"{type(exc).__name__}: {exc}") from None
    try:
        inner = env.unwrapped
        splits = {s: task_ids(inner, s) for s in SPLITS}
        every = task_ids(inner)
        return EnvFacts(canonical, kwargs, turn_limit(canonical, inner), splits, len(every),
                        bool(getattr(inner, "has_solver", False)), _longest_actions(env, every))
    finally:
        env.close()


def _longest_actions(env: Any, tasks: list[str]) -> tuple[str, ...]:
    """The longest texts of `valid_actions()` right after a few resets (empty when the env has none)."""
    inner = env.unwrapped
    if getattr(type(inner), "valid_actions", AgentEnv.valid_actions) is AgentEnv.valid_actions:
        return ()  # no finite action set: nothing to reset for (resets can start containers or browsers)
    seen: set[str] = set()
    for i, task in enumerate(tasks[:_VOCAB_PROBES] or [None]):
        env.reset(seed=i, options={"task_id": task} if task is not None else None)
        actions = inner.valid_actions()
        if actions is None:
            break
        seen.update(actions)
    return tuple(sorted(seen, key=len, reverse=True)[:8])


def action_budget_error(facts: EnvFacts, tokenizer: Any, max_new_tokens: int) -> str | None:
    """A message when the longest well-formed action (plus the stop token) does not fit `max_new_tokens`."""
    if not facts.longest_actions:
        return None
    need, worst = max((len(tokenizer.encode(a, add_special_tokens=False)) + 1, a) for a in facts.longest_actions)
    if need <= max_new_tokens:
        return None
    return (f"max_new_tokens is {max_new_tokens}, but the env's action {worst!r} takes {need - 1} tokens plus the "
            f"stop token ({need} in all): generations would be cut and land as wrong actions. "
            f"Set max_new_tokens to at least {need} (e.g. --set max_new_tokens={need})")


def eval_count(eval_tasks: int | str) -> int | None:
    """`eval_tasks` as a count for `split_for_run` ("all": None)."""
    return None if eval_tasks == "all" else int(eval_tasks)


def split_for_run(facts: EnvFacts, split: str, count: int | None, what: str) -> list[str]:
    """The first `count` ids of `split` (all when None), or a `ConfigError` naming the sizes."""
    ids = facts.splits.get(split, [])
    if count is None:
        return list(ids)
    if len(ids) < count:
        sizes = ", ".join(f"{s} {len(v)}" for s, v in facts.splits.items())
        raise ConfigError(f"{what} is {count}, but {facts.env_id} has only {len(ids)} tasks in its {split!r} split "
                          f"({sizes}); lower {what} or give the env more tasks")
    return list(ids[:count])


def resolve_run_env(cfg: Any) -> tuple[Any, EnvFacts]:
    """(`cfg` with its turn limit made concrete, the env's facts) for a `TrainConfig`.

    `max_turns: null` becomes the env's own limit, so the warm start, RL and evaluation (and the
    run's stored config) all name the same number.
    """
    facts = inspect_env(cfg.env, cfg.env_kwargs)
    if cfg.max_turns is None and facts.turn_limit is not None:
        cfg = cfg.model_copy(update={"max_turns": facts.turn_limit})
    if cfg.eval_tasks:
        if not split_for_run(facts, "eval", eval_count(cfg.eval_tasks), "eval_tasks"):
            raise ConfigError(f"eval_tasks is {cfg.eval_tasks!r}, but {facts.env_id}'s 'eval' split is empty; "
                              "set eval_tasks: 0 or give the env more tasks or its own splits")
    if cfg.train_tasks:
        split_for_run(facts, "train", cfg.train_tasks, "train_tasks")
    if cfg.sft_steps and not facts.has_solver:
        raise ConfigError(f"sft_steps is {cfg.sft_steps}, but {facts.env_id} has no solver_action() to demonstrate "
                          "with; set sft_steps: 0 (and start from a model that already acts), or add a solver")
    return cfg, facts
