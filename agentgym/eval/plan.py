"""What an eval runs: which envs (with kwargs and turn limits), which tasks of each, how many attempts.

Every check happens here, before any episode: unknown env ids (with the
closest registered ids), bad env kwargs (a probe env is made), k < 1, task ids
the env does not have, a task selection that cannot be resolved. The plan is
stored with the eval run, so `--resume` finishes exactly the same eval.

Task selections (``--tasks``):

- ``eval``: the env's eval split (its own, or the stable hash split of `agentgym.splits`);
  for a training run's checkpoint on that run's env, the run's held-out tasks (the first
  ``eval_tasks`` of that split, as the trainer picks them);
- ``N``: the first N task ids of the env;
- ``ID,ID,...``: those tasks (each must be one of the env's).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentgym import splits
from agentgym.errors import ConfigError
from agentgym.policy.checkpoints import RunProfile
from agentgym.registration import make, registry, resolve_turn_limit, turn_limit


@dataclass
class EnvEntry:
    """One env of an eval as asked for (CLI argument or YAML entry)."""

    env_id: str
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    tasks: str | None = None  #: this env's selection (None: the eval's)
    max_turns: int | None = None


@dataclass
class EvalEnv:
    """One env of an eval, resolved: canonical id, kwargs, turn limit and the task ids to attempt."""

    env_id: str
    env_kwargs: dict[str, Any]
    max_turns: int
    task_ids: list[str]


@dataclass
class EvalPlan:
    """A whole eval; stored as the eval run's config (``kind: eval``)."""

    policy: str  #: the policy spec as written
    k: int  #: attempts per task
    envs: list[EvalEnv]
    seed: int = 0
    success_reward: float = 1.0  #: an episode succeeds when its total reward reaches this
    max_infra_retries: int = 2  #: rounds that retry attempts lost to infrastructure failures
    options: dict[str, Any] = field(default_factory=dict)  #: the policy's sampling/loading options (a resume reuses them)
    context: dict[str, Any] = field(default_factory=dict)  #: keep_turns, max_prompt_tokens, episode_token_budget
    kind: str = "eval"

    def to_config(self, policy_record: dict[str, Any]) -> dict[str, Any]:
        return {**asdict(self), "policy_record": policy_record}

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> EvalPlan:
        if config.get("kind") != "eval":
            raise ConfigError("that run is not an eval run (its config has no kind: eval)")
        names = cls.__dataclass_fields__
        values = {k: v for k, v in config.items() if k in names}
        values["envs"] = [EvalEnv(**e) for e in config["envs"]]
        return cls(**values)

    def collector_settings(self) -> dict[str, Any]:
        """Collector keyword arguments of `context` (the context window and the episode token budget)."""
        from agentgym.collector.window import context_settings

        return context_settings(**self.context)

    def same_work(self, other: EvalPlan) -> list[str]:
        """What differs between two plans in what they run (empty: the same eval)."""
        diffs = [f"{name}: {getattr(self, name)!r} vs {getattr(other, name)!r}"
                 for name in ("policy", "k", "seed", "success_reward", "options", "context")
                 if getattr(self, name) != getattr(other, name)]
        if [asdict(e) for e in self.envs] != [asdict(e) for e in other.envs]:
            diffs.append("envs, kwargs, turn limits or tasks differ")
        return diffs


def load_env_file(path: str | Path) -> tuple[list[EnvEntry], dict[str, Any]]:
    """Env entries and top-level defaults (policy, k, tasks, ...) of an eval YAML file.

    ::

        policy: hf:runs/quickstart@latest
        k: 4
        envs:
          - Maze-v0
          - {id: SQL-v0, kwargs: {split: dev}, tasks: "20", max_turns: 8}
    """
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read eval file {path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("envs"), list) or not data["envs"]:
        raise ConfigError(f"eval file {path} must be a mapping with a non-empty 'envs:' list")
    entries = [_entry(item, path) for item in data["envs"]]
    return entries, {k: v for k, v in data.items() if k != "envs"}


def _entry(item: Any, path: str | Path) -> EnvEntry:
    if isinstance(item, str):
        return EnvEntry(item)
    if not isinstance(item, dict) or "id" not in item:
        raise ConfigError(f"eval file {path}: each env is an id or a mapping with 'id:', got {item!r}")
    unknown = set(item) - {"id", "kwargs", "tasks", "max_turns"}
    if unknown:
        raise ConfigError(f"eval file {path}: unknown keys {sorted(unknown)} in env {item['id']}; "
                          "use id, kwargs, tasks, max_turns")
    tasks = item.get("tasks")
    return EnvEntry(item["id"], dict(item.get("kwargs") or {}), None if tasks is None else str(tasks),
                    item.get("max_turns"))


def resolve_env(entry: EnvEntry, selection: str, profile: RunProfile | None, max_turns: int | None) -> EvalEnv:
    """Check `entry` and pick its tasks (`selection` unless the entry has its own)."""
    spec = registry[entry.env_id]  # UnknownEnvError names the closest ids
    same_env = profile is not None and bool(profile.env) and registry.canonical(profile.env) == spec.id
    kwargs = entry.env_kwargs or (dict(profile.env_kwargs) if same_env else {})
    try:
        env = make(spec.id, **kwargs)
    except TypeError as exc:
        raise ConfigError(f"{spec.id}: bad env kwargs {kwargs}: {exc}") from None
    try:
        inner = env.unwrapped
        limit = resolve_turn_limit(entry.max_turns, max_turns, profile.max_turns if same_env else None,
                                   turn_limit(spec.id, env))
        task_ids = _select(spec.id, inner, entry.tasks or selection, profile if same_env else None)
    finally:
        env.close()
    return EvalEnv(spec.id, kwargs, int(limit), task_ids)


def _select(env_id: str, inner: Any, selection: str, profile: RunProfile | None) -> list[str]:
    every = [str(t) for t in splits.task_ids(inner)]
    if not every:
        raise ConfigError(f"{env_id} lists no task ids (task_ids() is empty), so an eval cannot name its tasks")
    selection = selection.strip()
    if selection == "eval":
        return _eval_split(env_id, inner, profile)
    if selection.isdigit():
        n = int(selection)
        if not 1 <= n <= len(every):
            raise ConfigError(f"--tasks {n}: {env_id} has {len(every)} tasks; pick 1..{len(every)}")
        return every[:n]
    ids = [t.strip() for t in selection.split(",") if t.strip()]
    known = set(every)
    unknown = [t for t in ids if t not in known]
    if unknown:
        raise ConfigError(f"{env_id} has no task {unknown[0]!r}" + (f" (nor {unknown[1:]})" if unknown[1:] else "")
                          + f"; its tasks look like {every[:3]} ({len(every)} in all)")
    return ids


def _eval_split(env_id: str, inner: Any, profile: RunProfile | None) -> list[str]:
    split = splits.task_ids(inner, "eval")
    ids = profile.held_out(split) if profile is not None and profile.eval_tasks else split
    if not ids:
        raise ConfigError(f"{env_id}'s eval split is empty ({len(splits.task_ids(inner))} tasks in all); "
                          "pass --tasks N (the first N tasks) or --tasks ID,ID,...")
    return ids


def check_k(k: int) -> None:
    if k < 1:
        raise ConfigError(f"-k must be >= 1 attempt per task, got {k}")
