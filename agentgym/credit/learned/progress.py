"""SPA's progress estimator: per-turn contributions c_t whose sum approximates the outcome R.

Architecture (docs/algorithms.md, section 2.4): a causal-LM backbone (same family as the policy); at the
last token of each turn, the model's output logits (a vocabulary-size vector) go through
`Linear(V, 1)` to give c_t. Causal attention means c_t only sees the prefix. Objective:
`L_PE = mean_over_batch (R - sum_t c_t)^2`. The trainer calls `update(batch)` once per iteration,
then `predict(batch)` feeds `compute_credit("spa", batch, contributions=..., values=...)`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from agentgym.credit.learned.backbone import (
    CreditModelStats,
    accumulate_gradients,
    gather_rows,
    hidden_states,
    load_backbone,
    make_optimizer,
    no_grad_batches,
    pack_episode,
    torch,
    warmup_factor,
    zero_head,
)
from agentgym.trajectory import Episode


class ProgressEstimator:
    """Backbone + `Linear(V, 1)` on the logits at each turn's last token (see module docstring)."""

    def __init__(self, backbone: str | os.PathLike[str] | Any, *, lr: float = 3e-6, weight_decay: float = 0.01,
                 warmup_steps: int = 500, grad_clip: float = 1.0, micro_batch_size: int = 2,
                 max_tokens: int = 8192, dtype: Any = None, device: str | None = None, seed: int = 0):
        if lr <= 0 or micro_batch_size < 1 or grad_clip <= 0:
            raise ValueError(f"ProgressEstimator needs lr > 0, micro_batch_size >= 1, grad_clip > 0; got lr={lr}, "
                             f"micro_batch_size={micro_batch_size}, grad_clip={grad_clip}.")
        self.model = load_backbone(backbone, dtype=dtype, device=device)
        self.lm_head = self.model.get_output_embeddings()
        vocab = self.lm_head.weight.shape[0]
        torch.manual_seed(seed)
        self.head = zero_head(vocab, self.lm_head.weight)  # untrained: every contribution starts at 0
        self.lr, self.warmup_steps, self.grad_clip = lr, warmup_steps, grad_clip
        self.micro_batch_size, self.max_tokens = micro_batch_size, max_tokens
        self.optimizer = make_optimizer([*self.model.parameters(), *self.head.parameters()], lr, weight_decay)
        self.step = 0

    def parameters(self) -> list[Any]:
        return [*self.model.parameters(), *self.head.parameters()]

    def contributions(self, episodes: Sequence[Episode]) -> list[Any]:
        """Per episode a tensor [T_i] of c_t (with gradient)."""
        packed = [pack_episode(ep, self.max_tokens) for ep in episodes]
        hidden, _ = hidden_states(self.model, packed)
        ends = gather_rows(hidden, [p.turn_ends for p in packed])  # [sum T_i, H]
        c = self.head(self.lm_head(ends)).squeeze(-1)
        return list(torch.split(c, [len(p.turn_ends) for p in packed]))

    def predict(self, episodes: Sequence[Episode]) -> list[list[float]]:
        """Per episode, one contribution c_t per turn (no gradient; micro-batched)."""
        def run(chunk: list[Episode]) -> list[list[float]]:
            with_turns = [ep for ep in chunk if ep.turns]
            values = iter(self.contributions(with_turns)) if with_turns else iter(())
            return [next(values).float().tolist() if ep.turns else [] for ep in chunk]

        return no_grad_batches(self.model, episodes, self.micro_batch_size, run)

    def loss(self, episodes: Sequence[Episode]) -> Any:
        """`mean (R - sum_t c_t)^2` over `episodes` (a scalar tensor with gradient)."""
        sums = torch.stack([c.sum() for c in self.contributions(episodes)])
        target = torch.tensor([ep.total_reward for ep in episodes], dtype=sums.dtype, device=sums.device)
        return ((target - sums) ** 2).mean()

    def update(self, batch: Sequence[Episode]) -> CreditModelStats:
        """One optimizer step on `batch` (episodes without turns are skipped), gradient-accumulated."""
        usable = [ep for ep in batch if ep.turns]
        if not usable:
            return CreditModelStats(0.0, 0.0, 0, skipped=True, step=self.step)
        total = accumulate_gradients(self.model, self.optimizer, usable, self.micro_batch_size, self.loss)
        self.step += 1
        lr = self.lr * warmup_factor(self.step, self.warmup_steps)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        norm = float(torch.nn.utils.clip_grad_norm_(self.parameters(), self.grad_clip))
        self.optimizer.step()
        return CreditModelStats(total, norm, len(usable), step=self.step, lr=lr)

    def state_dict(self) -> dict[str, Any]:
        """Model, head and optimizer state plus the step counter (for trainer checkpoints)."""
        return {"model": self.model.state_dict(), "head": self.head.state_dict(),
                "optimizer": self.optimizer.state_dict(), "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
