"""Checkpoints that resume exactly, also after SIGKILL.

A checkpoint is a directory ``checkpoints/update-000010/`` holding

- ``policy/``: the model (or only the LoRA adapter) in Hugging Face format, loadable by `load_model`;
- ``state.pt``: the exact trainable weights, optimizer, LR scheduler, critic, RNG states
  (python, numpy, torch, cuda), the data manager's cursor, the policy version and the update count.

It is written into a temporary directory and renamed into place, then the
``latest`` file is replaced atomically, so a kill at any moment leaves the
previous checkpoint intact and never a half-written one that `latest` names.
"""

from __future__ import annotations

import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from agentgym.trainer.model import is_lora


@dataclass
class TrainerState:
    """What a checkpoint restores besides the weights."""

    update: int  #: updates completed
    policy_version: int  #: the rollout backend's version after those updates
    cursor: dict[str, Any]  #: `agentgym.data.Cursor.to_dict()`
    extra: dict[str, Any]  #: estimator state (learned credit models), metrics history, ...


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def trainable_state(model: Any) -> dict[str, torch.Tensor]:
    """Full state dict, or only the adapter weights of a LoRA model."""
    if is_lora(model):
        from peft import get_peft_model_state_dict

        return {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(model).items()}
    return {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}


def load_trainable_state(model: Any, state: dict[str, torch.Tensor]) -> None:
    if is_lora(model):
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, state)
    else:
        model.load_state_dict(state)


class CheckpointManager:
    """Save / find / load checkpoints under ``<run_dir>/checkpoints``."""

    def __init__(self, run_dir: str | os.PathLike[str], keep: int = 2):
        self.root = Path(run_dir) / "checkpoints"
        self.keep = keep

    def save(self, *, model: Any, tokenizer: Any, optimizer: torch.optim.Optimizer, scheduler: Any,
             state: TrainerState, critic: Any = None) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / f"update-{state.update:06d}"
        tmp = self.root / f".tmp-{final.name}-{os.getpid()}"
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp / "policy")
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp / "policy")
        payload = {
            "weights": trainable_state(model), "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(), "rng": rng_state(), "update": state.update,
            "policy_version": state.policy_version, "cursor": state.cursor, "extra": state.extra,
            "critic": critic.state_dict() if critic is not None else None,
        }
        torch.save(payload, tmp / "state.pt")
        _fsync_dir(tmp)
        return self._publish(tmp, final)

    def _publish(self, tmp: Path, final: Path) -> Path:
        """Move a fully written checkpoint into place, point `latest` at it (atomically) and prune old ones."""
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        latest_tmp = self.root / f".latest-{os.getpid()}"
        latest_tmp.write_text(final.name)
        os.replace(latest_tmp, self.root / "latest")
        self._prune()
        return final

    def latest(self) -> Path | None:
        """The newest complete checkpoint, or None."""
        pointer = self.root / "latest"
        if not pointer.exists():
            return None
        path = self.root / pointer.read_text().strip()
        return path if (path / "state.pt").exists() else None

    def load(self, path: Path, *, model: Any, optimizer: torch.optim.Optimizer, scheduler: Any,
             critic: Any = None) -> TrainerState:
        payload = torch.load(path / "state.pt", map_location="cpu", weights_only=False)
        load_trainable_state(model, payload["weights"])
        optimizer.load_state_dict(payload["optimizer"])
        scheduler.load_state_dict(payload["scheduler"])
        if critic is not None and payload["critic"] is not None:
            critic.load_state_dict(payload["critic"])
        set_rng_state(payload["rng"])
        return TrainerState(payload["update"], payload["policy_version"], payload["cursor"], payload["extra"])

    def _prune(self) -> None:
        done = sorted(p for p in self.root.glob("update-*") if p.is_dir())
        for old in done[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    for file in path.rglob("*"):
        if file.is_file():
            with open(file, "rb") as fh:
                os.fsync(fh.fileno())
