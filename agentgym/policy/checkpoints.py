"""Find the model a ``hf:`` spec names: a model directory, or a checkpoint of a training run.

A training run directory (``runs/quickstart``) holds ``checkpoints/update-000050/policy/``
(a ``save_pretrained`` directory, or only a LoRA adapter), a ``checkpoints/latest``
pointer, ``checkpoints/sft/policy/`` (the model after the SFT warm start) and
``run_config.json`` (the run's config). A checkpoint also knows the run's policy
version, so episodes of an eval carry the version the trainer gave those weights.

The run's config supplies defaults that make an eval match what training saw:
env kwargs, turn limit, ``max_new_tokens``, whether tools go into the prompt,
and the held-out task split (`RunProfile`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError

RUN_CONFIG = "run_config.json"  #: the config a training run writes into its directory
_UPDATE = re.compile(r"^update-(\d+)$")


@dataclass(frozen=True)
class RunProfile:
    """What a training run's config says about how its policy acted."""

    env: str = ""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    max_turns: int | None = None
    max_new_tokens: int | None = None
    chat_tools: bool = True
    eval_tasks: int | str = 0  #: held-out tasks: the first N of the env's eval split ("all": the whole split)
    success_reward: float = 1.0

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> RunProfile:
        names = cls.__dataclass_fields__
        return cls(**{k: v for k, v in config.items() if k in names and v is not None})

    def held_out(self, eval_split: list[str]) -> list[str]:
        """The run's held-out tasks, given the env's eval split (the trainer's own choice)."""
        if self.eval_tasks == "all":
            return list(eval_split)
        return list(eval_split[:int(self.eval_tasks)])


@dataclass(frozen=True)
class ModelLocation:
    """Where the weights of a ``hf:`` spec are, and what is known about them."""

    path: str  #: a from_pretrained directory (or a hub name)
    run_dir: Path | None = None  #: the training run it belongs to
    checkpoint: str | None = None  #: "update-000050", "sft", ...
    update: int | None = None  #: updates done when it was written
    profile: RunProfile | None = None  #: the run's config, when the run wrote one

    @property
    def is_adapter(self) -> bool:
        return (Path(self.path) / "adapter_config.json").exists()

    def describe(self) -> dict[str, Any]:
        return {"path": self.path, "run_dir": str(self.run_dir) if self.run_dir else None,
                "checkpoint": self.checkpoint, "update": self.update}


def locate_model(target: str, ref: str | None) -> ModelLocation:
    """Resolve ``hf:TARGET[@REF]``; `ConfigError` naming what exists when the checkpoint does not."""
    path = Path(target).expanduser()
    is_run = (path / "checkpoints").is_dir() or (path / RUN_CONFIG).exists()
    if ref is None and _is_model_dir(path):
        return ModelLocation(str(path))
    if ref is None and not is_run:
        if path.exists():
            raise ConfigError(f"hf:{target} is a directory but neither a model (no config.json or adapter_config.json) "
                              "nor a training run (no checkpoints/)")
        if target.count("/") == 1 and not target.startswith((".", "/", "~")):
            return ModelLocation(target)  # a hub name: from_pretrained finds it or says why not
        raise ConfigError(f"hf:{target}: no such model directory; pass a directory written by save_pretrained, "
                          "a training run directory with @latest / @update-N, or a hub name like Qwen/Qwen2.5-0.5B")
    if not (path / "checkpoints").is_dir():
        raise ConfigError(f"hf:{target}@{ref}: {path} has no checkpoints/ directory; is it a training run "
                          "(runs/NAME)? Checkpoints are written every checkpoint_every updates")
    return _run_checkpoint(path, ref or "latest")


def _run_checkpoint(run_dir: Path, ref: str) -> ModelLocation:
    root = run_dir / "checkpoints"
    available = sorted(p.name for p in root.glob("update-*") if (p / "policy").is_dir())
    if ref == "latest":
        pointer = root / "latest"
        name = pointer.read_text().strip() if pointer.exists() else (available[-1] if available else "")
        if not name:
            raise ConfigError(f"training run {run_dir} has no checkpoint yet (checkpoints/ is empty)")
    elif ref == "sft":
        name = "sft"
    else:
        name = f"update-{int(ref.split('-', 1)[1]):06d}"
    policy = root / name / "policy"
    if not policy.is_dir():
        have = ", ".join(f"@{_short(n)}" for n in available) or "none"
        sft = " and @sft" if (root / "sft" / "policy").is_dir() else ""
        raise ConfigError(f"training run {run_dir} has no checkpoint @{_short(name)}; it has {have}{sft} "
                          "(older ones are pruned: keep_checkpoints in the run's config)")
    match = _UPDATE.match(name)
    return ModelLocation(str(policy), run_dir, name, int(match.group(1)) if match else 0, _profile(run_dir))


def policy_version(location: ModelLocation) -> int | None:
    """The trainer's policy version of a run checkpoint (from its state.pt), None for a plain model."""
    if location.run_dir is None or location.checkpoint == "sft":
        return 0 if location.checkpoint == "sft" else None
    state = Path(location.path).parent / "state.pt"
    if not state.exists():
        return None
    import torch

    payload = torch.load(state, map_location="cpu", weights_only=False, mmap=True)
    return int(payload.get("policy_version", location.update or 0))


def _profile(run_dir: Path) -> RunProfile | None:
    config = run_dir / RUN_CONFIG
    if not config.exists():
        return None
    try:
        return RunProfile.from_config(json.loads(config.read_text()))
    except (json.JSONDecodeError, TypeError) as exc:
        raise ConfigError(f"cannot read the run config {config}: {exc}") from None


def _is_model_dir(path: Path) -> bool:
    return (path / "config.json").exists() or (path / "adapter_config.json").exists()


def _short(name: str) -> str:
    match = _UPDATE.match(name)
    return f"update-{int(match.group(1))}" if match else name
