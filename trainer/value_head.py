"""The critic for estimators that need one (`gae`, and `spa` whose spec uses PPO with GAE).

A separate backbone (a copy of the policy's initial weights) with a scalar
head, so value regression never moves the policy, and with its own optimizer
and learning rate. The value of turn t is read at the last context token
before the turn's first action token (`TokenBatch.value_index`). Critic-free
estimators never build it.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
from agentgym.trainer.forward import flat_forward
from agentgym.trainer.loss import value_loss
from agentgym.trainer.packing import TokenBatch
from torch import nn


class ValueModel(nn.Module):
    """Backbone + linear head; `forward(batch)` gives one value per turn (``[K]``)."""

    def __init__(self, policy: Any):
        super().__init__()
        base = policy.get_base_model() if hasattr(policy, "peft_config") else policy
        self.backbone = copy.deepcopy(getattr(base, "model", base))
        hidden = base.config.hidden_size
        self.head = nn.Linear(hidden, 1)
        nn.init.zeros_(self.head.weight)
        nn.init.zeros_(self.head.bias)
        self.head.to(next(self.backbone.parameters()).device, dtype=next(self.backbone.parameters()).dtype)

    def forward(self, batch: TokenBatch) -> torch.Tensor:
        hidden = flat_forward(self.backbone, batch, lambda o: [o.last_hidden_state])[0]
        return self.head(hidden.index_select(0, batch.value_index)).squeeze(-1).float()


@dataclass
class CriticStats:
    value_loss: float
    value_mean: float
    explained_variance: float


class Critic:
    """The value model, its optimizer and the clipped value update."""

    def __init__(self, policy: Any, *, lr: float, value_clip: float | None, max_grad_norm: float = 1.0,
                 epochs: int = 4):
        self.model = ValueModel(policy)
        self.model.train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr)
        self.value_clip = value_clip
        self.max_grad_norm = max_grad_norm
        self.epochs = epochs
        #: the head's bias starts at the first batch's mean target (set by the first `update`)
        self.centred = False

    @torch.no_grad()
    def values(self, batches: list[TokenBatch]) -> list[torch.Tensor]:
        """Current values per turn of every batch (no gradient): the estimator's V_t."""
        self.model.eval()
        out = [self.model(b) for b in batches]
        self.model.train()
        return out

    def update(self, batches: list[TokenBatch], old_values: list[torch.Tensor], epochs: int | None = None
               ) -> CriticStats:
        """Regress values onto each batch's `value_targets` with the clipped loss; one step per epoch
        (`epochs`, default the critic's own), after centring the head on the first batch's mean target.

        Why both: the head starts at zero and AdamW moves each weight by about `lr` per step, so a critic that
        took one step per update (PPO's `ppo_epochs` = 1) still predicted almost nothing after dozens of
        updates (explained variance 0.00 in SPA's runs, docs/credit-log.md), and GAE passed the raw returns
        through. The bias starts at the returns' level at once; the epochs fit what varies around it.
        """
        if not self.centred and batches:
            targets = torch.cat([b.value_targets for b in batches]).float()
            with torch.no_grad():
                self.model.head.bias.fill_(float(targets.mean()))
            self.centred = True
            old_values = self.values(batches)
        epochs = self.epochs if epochs is None else epochs
        total_turns = sum(int(b.value_index.numel()) for b in batches)
        loss_sum = 0.0
        preds: list[torch.Tensor] = []
        for _ in range(epochs):
            self.optimizer.zero_grad(set_to_none=True)
            preds = []
            for batch, old in zip(batches, old_values, strict=True):
                v = self.model(batch)
                mask = torch.ones_like(v)
                loss = value_loss(v, old.to(v), batch.value_targets.to(v), mask, self.value_clip)
                (loss * v.numel() / max(total_turns, 1)).backward()
                loss_sum += float(loss.detach()) * v.numel() / max(total_turns, 1)
                preds.append(v.detach())
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
            self.optimizer.step()
        pred = torch.cat(preds) if preds else torch.zeros(0)
        target = torch.cat([b.value_targets for b in batches]).to(pred) if batches else torch.zeros(0)
        var = float(target.var()) if target.numel() > 1 else 0.0
        ev = 1.0 - float((target - pred).var()) / var if var > 0 else 0.0
        return CriticStats(loss_sum / epochs, float(pred.mean()) if pred.numel() else 0.0, ev)

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "centred": self.centred}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.centred = bool(state.get("centred", True))  # a checkpoint from before centring: a trained head
