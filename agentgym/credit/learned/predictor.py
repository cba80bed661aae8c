"""TRACE's shared success predictor as a tiny LM: p_hat(h) = sigmoid(w . hidden(last token of h) + b).

The prefix h is read as recorded token ids: every prefix turn's `prompt_ids + action_ids`, then the
`prompt_ids` of the next turn (the observation at the branch point). It is trained online with
binary cross-entropy on (prefix, final outcome) pairs and plugs into `TraceAllocator(predictor=...)`
(it implements the `SuccessPredictor` protocol of `agentgym.credit.trace_predict`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from agentgym.credit.learned.backbone import (
    Packed,
    accumulate_gradients,
    hidden_states,
    load_backbone,
    make_optimizer,
    no_grad_batches,
    torch,
    zero_head,
)
from agentgym.credit.trace_predict import Prefix


def prefix_ids(prefix: Prefix, max_tokens: int) -> list[int]:
    """The prefix's token ids (the last `max_tokens` of them; a lone 0 when it has none)."""
    ids: list[int] = []
    for turn in prefix.turns:
        ids.extend(turn.prompt_ids)
        ids.extend(turn.action_ids)
    if prefix.next_turn is not None:
        ids.extend(prefix.next_turn.prompt_ids)
    return ids[-max_tokens:] or [0]


class LMSuccessPredictor:
    """Backbone + `Linear(H, 1)` on the last hidden state of the prefix."""

    def __init__(self, backbone: str | os.PathLike[str] | Any, *, lr: float = 1e-4, weight_decay: float = 0.0,
                 micro_batch_size: int = 8, max_tokens: int = 2048, dtype: Any = None, device: str | None = None,
                 seed: int = 0):
        self.model = load_backbone(backbone, dtype=dtype, device=device)
        width = self.model.get_input_embeddings().weight.shape[1]
        torch.manual_seed(seed)
        self.head = zero_head(width, self.model.get_input_embeddings().weight)  # untrained: p_hat = 0.5 everywhere
        self.micro_batch_size, self.max_tokens = micro_batch_size, max_tokens
        self.optimizer = make_optimizer([*self.model.parameters(), *self.head.parameters()], lr, weight_decay)
        self.n_seen = 0

    def _logits(self, prefixes: Sequence[Prefix]) -> Any:
        packed = [Packed(prefix_ids(p, self.max_tokens), [], []) for p in prefixes]
        hidden, device = hidden_states(self.model, packed)
        last = torch.tensor([len(p.ids) - 1 for p in packed], dtype=torch.long, device=device)
        return self.head(hidden[torch.arange(len(packed), device=device), last]).squeeze(-1).float()

    def predict(self, prefixes: Sequence[Prefix]) -> np.ndarray:
        """[N] success probabilities."""
        probs = no_grad_batches(self.model, prefixes, self.micro_batch_size,
                                lambda chunk: torch.sigmoid(self._logits(chunk)).cpu().numpy())
        return np.asarray(probs, dtype=np.float32) if probs else np.zeros(0)

    def update(self, prefixes: Sequence[Prefix], labels: np.ndarray) -> float:
        """One optimizer step of BCE over (prefix, label in [0, 1]); returns the loss before the step."""
        if not len(prefixes):
            return 0.0
        labels = np.clip(np.asarray(labels, dtype=np.float64), 0.0, 1.0)

        def loss_of(chunk: list[tuple[Prefix, float]]) -> Any:
            logits = self._logits([prefix for prefix, _ in chunk])
            target = torch.tensor([label for _, label in chunk], dtype=logits.dtype, device=logits.device)
            return torch.nn.functional.binary_cross_entropy_with_logits(logits, target)

        total = accumulate_gradients(self.model, self.optimizer, list(zip(prefixes, labels, strict=True)),
                                     self.micro_batch_size, loss_of)
        self.optimizer.step()
        self.n_seen += len(prefixes)
        return total

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "head": self.head.state_dict(),
                "optimizer": self.optimizer.state_dict(), "n_seen": self.n_seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.head.load_state_dict(state["head"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.n_seen = int(state["n_seen"])
