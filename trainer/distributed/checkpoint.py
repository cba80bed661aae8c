"""Sharded checkpoints through `torch.distributed.checkpoint` (DCP) for ddp and fsdp2 runs.

A checkpoint directory ``checkpoints/update-000010/`` holds

- ``shards/``: the model and the optimizer as DCP writes them (one file per rank plus
  ``.metadata``), keyed by parameter name (`get_state_dict`), so a checkpoint saved
  with N ranks loads into M ranks: DCP reshards on load;
- ``policy/``: the full model in Hugging Face format (loadable by `load_model`);
- ``state.pt``: LR scheduler, RNG states, the data cursor, the policy version and the
  update count (the same `TrainerState` as one-process checkpoints), and the critic (it lives on the
  leader alone, like the learned credit models, which travel in the state's `extra`).

Every rank writes its shard into the same directory (a filesystem shared by the
nodes), then the leader renames it into place and replaces ``latest`` atomically,
so a kill at any moment leaves the previous checkpoint intact. The leader drives
it: `save` and `load` tell the followers to enter the same DCP collectives.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import torch
from agentgym.trainer.checkpoint import CheckpointManager, TrainerState, rng_state, set_rng_state
from agentgym.trainer.distributed.group import RankGroup


class ShardedCheckpointManager(CheckpointManager):
    """`CheckpointManager`'s interface (save / latest / load) over DCP shards."""

    def __init__(self, run_dir: str | os.PathLike[str], group: RankGroup, strategy: Any, keep: int = 2):
        super().__init__(run_dir, keep=keep)
        self.group, self.strategy = group, strategy

    # ---- leader ----------------------------------------------------------------------------------
    def save(self, *, model: Any, tokenizer: Any, optimizer: torch.optim.Optimizer, scheduler: Any,
             state: TrainerState, critic: Any = None) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        final = self.root / f"update-{state.update:06d}"
        tmp = self.root / f".tmp-{final.name}"
        shutil.rmtree(tmp, ignore_errors=True)
        self.group.lead("save", str(tmp))
        full = self.save_shards(tmp, optimizer)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        base.save_pretrained(tmp / "policy", state_dict=full)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp / "policy")
        payload = {"scheduler": scheduler.state_dict(), "rng": rng_state(), "update": state.update,
                   "policy_version": state.policy_version, "cursor": state.cursor, "extra": state.extra,
                   "world_size": self.group.world_size, "strategy": self.strategy.name,
                   "critic": critic.state_dict() if critic is not None else None}  # the leader's alone
        torch.save(payload, tmp / "state.pt")
        return self._publish(tmp, final)

    def latest(self) -> Path | None:
        path = super().latest()
        return path if path is not None and (path / "shards" / ".metadata").exists() else None

    def load(self, path: Path, *, model: Any, optimizer: torch.optim.Optimizer, scheduler: Any,
             critic: Any = None) -> TrainerState:
        self.group.lead("load", str(path))
        payload = self.load_shards(path, optimizer, scheduler)
        if critic is not None and payload.get("critic") is not None:
            critic.load_state_dict(payload["critic"])
        return TrainerState(payload["update"], payload["policy_version"], payload["cursor"], payload["extra"])

    # ---- every rank ------------------------------------------------------------------------------
    def save_shards(self, directory: str | Path, optimizer: torch.optim.Optimizer) -> dict[str, torch.Tensor]:
        """Write this rank's shard (collective); returns the full model state on the leader (empty elsewhere)."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_sd, optim_sd = get_state_dict(self.strategy.model, optimizer)
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=str(Path(directory) / "shards"))
        return self.strategy.full_state_dict()

    def load_shards(self, directory: str | Path, optimizer: torch.optim.Optimizer, scheduler: Any) -> dict[str, Any]:
        """Read the shards into this rank's layout (any saved world size), then the scheduler and RNG."""
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

        model = self.strategy.model
        model_sd, optim_sd = get_state_dict(model, optimizer)
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=str(Path(directory) / "shards"))
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
        payload = torch.load(Path(directory) / "state.pt", map_location="cpu", weights_only=False)
        scheduler.load_state_dict(payload["scheduler"])
        set_rng_state(payload["rng"])
        return payload


def checkpoint_manager(cfg: Any, c: Any) -> CheckpointManager:
    """One-process checkpoints for `strategy: single`, DCP shards for ddp / fsdp2 (`c`: the run's Components)."""
    if cfg.strategy == "single":
        return CheckpointManager(cfg.run_dir, keep=cfg.keep_checkpoints)
    strategy = c.policy.updater.strategy
    return ShardedCheckpointManager(cfg.run_dir, strategy.group, strategy, keep=cfg.keep_checkpoints)
