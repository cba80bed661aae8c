"""OPRL's implicit process reward model: a causal LM trained by trajectory DPO against the old policy.

    z(tau)  = sum_t sum_j ( lp_phi(y_tj) - lp_old(y_tj) )          (action tokens only)
    L_PRM   = -log sigmoid( beta * (z(tau+) - z(tau-)) )            (mean over preference pairs)
    r_t     = beta * sum_j ( lp_phi(y_tj) - lp_old(y_tj) )          (implicit step reward)

`lp_old` is `Turn.action_logprobs` (the snapshot policy that generated the data) unless given.
Pairs come from outcomes inside each group (`agentgym.credit.oprl.preference_pairs`). Per
iteration the trainer calls `update(batch)` (1..K steps), then `step_rewards(batch)` feeds
`compute_credit("oprl", batch, step_rewards=...)`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from agentgym.credit.errors import CreditInputError
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
)
from agentgym.credit.oprl import preference_pairs
from agentgym.trajectory import Episode


def old_logprobs(ep: Episode) -> list[list[float]]:
    """`Turn.action_logprobs` per turn, checked against the action ids."""
    rows = []
    for turn in ep.turns:
        if len(turn.action_logprobs) != len(turn.action_ids):
            raise CreditInputError(
                f"episode {ep.id} turn {turn.index} has {len(turn.action_ids)} action ids but "
                f"{len(turn.action_logprobs)} action_logprobs; OPRL needs lp_old for every action token "
                "(record the engine's log-probs, or recompute them with the old policy).")
        rows.append(turn.action_logprobs)
    return rows


class ImplicitPRM:
    """The implicit PRM pi_phi (initialise it from the initial policy's weights)."""

    def __init__(self, backbone: str | os.PathLike[str] | Any, *, beta: float = 0.05, lr: float = 1e-6,
                 weight_decay: float = 0.0, grad_clip: float = 1.0, margin: float = 0.0,
                 max_pairs_per_group: int | None = None, per_token_mean: bool = False, micro_batch_size: int = 4,
                 max_tokens: int = 8192, dtype: Any = None, device: str | None = None):
        if beta <= 0 or lr <= 0 or micro_batch_size < 1 or grad_clip <= 0:
            raise ValueError(f"ImplicitPRM needs beta > 0, lr > 0, micro_batch_size >= 1, grad_clip > 0; got "
                             f"beta={beta}, lr={lr}, micro_batch_size={micro_batch_size}, grad_clip={grad_clip}.")
        self.model = load_backbone(backbone, dtype=dtype, device=device)
        self.lm_head = self.model.get_output_embeddings()
        self.beta, self.lr, self.grad_clip, self.margin = beta, lr, grad_clip, margin
        self.max_pairs_per_group, self.per_token_mean = max_pairs_per_group, per_token_mean
        self.micro_batch_size, self.max_tokens = micro_batch_size, max_tokens
        self.optimizer = make_optimizer(self.model.parameters(), lr, weight_decay)
        self.step = 0

    # ---- log-probs --------------------------------------------------------------------------
    def _token_logprobs(self, episodes: Sequence[Episode]) -> list[list[Any]]:
        """Per episode, per turn, a tensor of lp_phi over the turn's action tokens (with gradient)."""
        packed = [pack_episode(ep, self.max_tokens) for ep in episodes]
        for ep, p in zip(episodes, packed, strict=True):
            if p.action_pos and p.action_pos[0][:1] == [0]:
                raise CreditInputError(f"episode {ep.id} starts with an action token and no prompt_ids; the "
                                       "first token has no context to score it from. Record the prompt ids.")
        hidden, device = hidden_states(self.model, packed)
        # token at position q is predicted from the hidden state at q - 1
        prev = [[q - 1 for turn in p.action_pos for q in turn] for p in packed]
        logits = self.lm_head(gather_rows(hidden, prev))
        targets = torch.tensor([p.ids[q] for p in packed for turn in p.action_pos for q in turn],
                               dtype=torch.long, device=device)
        lp = torch.log_softmax(logits.float(), dim=-1).gather(-1, targets[:, None]).squeeze(-1)
        out, offset = [], 0
        for p in packed:
            row = []
            for turn in p.action_pos:
                row.append(lp[offset: offset + len(turn)])
                offset += len(turn)
            out.append(row)
        return out

    def logprobs(self, episodes: Sequence[Episode]) -> list[list[list[float]]]:
        """lp_phi per episode, per turn, per action token (no gradient)."""
        return no_grad_batches(self.model, episodes, self.micro_batch_size,
                               lambda chunk: [[t.tolist() for t in row] for row in self._token_logprobs(chunk)])

    def _turn_diffs(self, episodes: Sequence[Episode]) -> list[Any]:
        """Per episode a tensor [T_i] of sum_j (lp_phi - lp_old) (or its per-token mean)."""
        out = []
        for ep, row in zip(episodes, self._token_logprobs(episodes), strict=True):
            diffs = []
            for lp, old in zip(row, old_logprobs(ep), strict=True):
                d = (lp - torch.tensor(old, dtype=lp.dtype, device=lp.device)).sum()
                diffs.append(d / max(len(old), 1) if self.per_token_mean else d)
            out.append(torch.stack(diffs) if diffs else torch.zeros(0, device=self.lm_head.weight.device))
        return out

    # ---- rewards and training ------------------------------------------------------------------
    def step_rewards(self, episodes: Sequence[Episode]) -> list[list[float]]:
        """Implicit step reward r_t = beta * sum_j (lp_phi - lp_old) per episode per turn."""
        return no_grad_batches(self.model, episodes, self.micro_batch_size,
                               lambda chunk: [(self.beta * d).tolist() for d in self._turn_diffs(chunk)])

    def pairs(self, episodes: Sequence[Episode]) -> list[tuple[int, int]]:
        """(preferred, rejected) batch indices from outcomes within each group."""
        return preference_pairs([ep.total_reward for ep in episodes], [ep.group_id for ep in episodes],
                                margin=self.margin, max_pairs_per_group=self.max_pairs_per_group)

    def loss(self, episodes: Sequence[Episode], pairs: Sequence[tuple[int, int]]) -> Any:
        """Trajectory-DPO loss over `pairs` of indices into `episodes` (scalar tensor with gradient)."""
        used = sorted({i for pair in pairs for i in pair})
        where = {e: k for k, e in enumerate(used)}
        z = torch.stack([d.sum() for d in self._turn_diffs([episodes[e] for e in used])])
        pos = z[[where[i] for i, _ in pairs]]
        neg = z[[where[j] for _, j in pairs]]
        return torch.nn.functional.softplus(-self.beta * (pos - neg)).mean()

    def update(self, batch: Sequence[Episode], pairs: Sequence[tuple[int, int]] | None = None,
               steps: int = 1) -> CreditModelStats:
        """`steps` optimizer steps on the pairs of `batch`; skipped when there are no pairs."""
        pairs = self.pairs(batch) if pairs is None else list(pairs)
        if not pairs:
            return CreditModelStats(0.0, 0.0, 0, skipped=True, step=self.step, lr=self.lr)
        first = 0.0
        for s in range(steps):
            total = accumulate_gradients(self.model, self.optimizer, pairs, self.micro_batch_size,
                                         lambda chunk: self.loss(batch, chunk))
            norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip))
            self.optimizer.step()
            self.step += 1
            first = total if s == 0 else first
        return CreditModelStats(first, norm, len(pairs), step=self.step, lr=self.lr)

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "step": self.step}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])
