"""One policy update from one batch of the data manager, top to bottom.

    credit    = agentgym.credit.compute_credit(estimator name, episodes, critic values, learned inputs)
    samples   = episodes -> sequences (advantages broadcast per token)
    lp_old    = no-grad forward with the weights at the start of the update (proximal policy)
    lp_ref    = frozen reference (only when KL is on)
    filter    = keep the highest-entropy turns (optional, DART)
    for epoch, mini-batch: accumulate micro-batch gradients, clip, step

Micro-batch losses are scaled so that the accumulated gradient equals the
gradient of the mini-batch's aggregated loss (token counts for token-mean,
sample counts for the sequence means). With several ranks (ddp, fsdp2) each
mini-batch is split over the ranks by tokens (`trainer.distributed.shard`) and
the counts are the global ones (all-reduced), so the objective and the update
are those of one process on the whole batch, whatever the world size.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any

import torch
from agentgym.trainer.credit_diagnostics import credit_diagnostics
from agentgym.trainer.credit_models import CreditModels
from agentgym.trainer.distributed.group import RankGroup
from agentgym.trainer.distributed.shard import idle_sample, split_by_tokens
from agentgym.trainer.distributed.strategy import Strategy, grad_norm_value
from agentgym.trainer.forward import token_logprobs
from agentgym.trainer.loss import LossConfig, policy_loss
from agentgym.trainer.model import trainable_parameters
from agentgym.trainer.packing import Sample, TokenBatch, collate, episode_to_sample, micro_batches
from agentgym.trainer.value_head import Critic

from agentgym.credit import CreditResult, compute_credit
from agentgym.data import TrainBatch, select_high_entropy_steps
from agentgym.trajectory import Episode


@dataclass(frozen=True)
class UpdateConfig:
    """Explicit knobs of `PolicyUpdater` (mapped from the run config)."""

    loss: LossConfig = LossConfig()
    temperature: float = 1.0
    ppo_epochs: int = 1
    mini_batches: int = 1
    micro_batch_tokens: int = 8192
    max_grad_norm: float = 1.0
    top_entropy_fraction: float | None = None
    critic_warmup_updates: int = 0
    packed: bool = True  #: padding-free packing (else length-sorted padded rows)
    pad_id: int = 0  #: pad token of the padded layout
    seed: int = 0  #: seed of the per-epoch mini-batch shuffle
    success_reward: float = 1.0  #: episodes at or above it count as successes (diagnostics only)
    estimator: str = "grpo"  #: credit estimator, by its name in `agentgym.credit.ESTIMATORS`
    estimator_params: Mapping[str, Any] = field(default_factory=dict)  #: its keyword arguments


@dataclass
class UpdateStats:
    """What one update did (scalars for the metrics row)."""

    loss: float = 0.0  #: the optimized objective (mean over optimizer steps; the same for every world size)
    policy_loss: float = 0.0
    kl: float = 0.0
    entropy: float = 0.0
    clip_fraction: float = 0.0
    is_weight_mean: float = 1.0
    is_dropped_fraction: float = 0.0  #: share of action tokens icepop/mask removed from the loss
    grad_norm: float = 0.0
    advantage_abs_mean: float = 0.0
    tokens: int = 0
    action_tokens: int = 0
    seconds: float = 0.0
    approx_kl_old: float = 0.0  #: k3 estimate of KL(pi_old || pi) over the update's tokens (drift per update)
    critic: dict[str, float] = field(default_factory=dict)
    credit_model: dict[str, float] = field(default_factory=dict)
    credit: dict[str, float] = field(default_factory=dict)  #: `credit_diagnostics` of the batch
    #: where `seconds` went, by part: `critic_values` (the critic's no-grad pass), `credit_inputs` (SPA's progress
    #: estimator / OPRL's PRM read on the batch, its pretraining included), `credit` (the estimator), `samples`
    #: (sequences and diagnostics), `critic` (the critic's update), `policy` (reference passes and policy epochs),
    #: `credit_model` (the learned credit model's update); parts a run does not have are absent
    parts: dict[str, float] = field(default_factory=dict)

    def flat(self) -> dict[str, float]:
        nested = ("critic", "credit_model", "credit", "parts")
        out = {k: float(v) for k, v in self.__dict__.items() if k not in nested}
        out.update({f"critic_{k}": v for k, v in self.critic.items()})
        out.update(self.credit_model)
        out.update({f"credit/{k}": v for k, v in self.credit.items()})
        out.update({f"update/{k}_s": v for k, v in self.parts.items()})
        return out


class _Clock:
    """Seconds per named part of one update (`UpdateStats.parts`)."""

    def __init__(self) -> None:
        self.parts: dict[str, float] = {}
        self.started = self._last = time.perf_counter()

    def lap(self, part: str) -> None:
        """Charge the time since the previous lap (or the start) to `part`."""
        now = time.perf_counter()
        self.parts[part] = self.parts.get(part, 0.0) + now - self._last
        self._last = now


class PolicyUpdater:
    """Holds the policy, its optimizer and schedule, the optional reference and critic; `update(batch)`."""

    def __init__(self, model: Any, optimizer: torch.optim.Optimizer, scheduler: Any, cfg: UpdateConfig, *,
                 critic: Critic | None = None, device: torch.device | None = None,
                 credit_models: CreditModels | None = None, strategy: Strategy | None = None,
                 reference: Any = None):
        self.model, self.optimizer, self.scheduler, self.cfg = model, optimizer, scheduler, cfg
        self.critic, self.credit_models = critic, credit_models
        self.strategy = strategy or Strategy(model, RankGroup())
        self.group = self.strategy.group
        self.device = device or next(model.parameters()).device
        if reference is None and cfg.loss.kl != "off":
            reference = self._reference()
        self.reference = reference
        self.updates_done = 0
        self.last_credit: CreditResult | None = None  #: what credit assignment computed for the last batch
        self._rng = torch.Generator().manual_seed(cfg.seed)  #: mini-batch order, reshuffled every epoch
        #: the critic's pass over the batch in `_samples`: its micro-batches (positions) and value tensors
        self._critic_pass: tuple[list[list[int]], list[torch.Tensor]] = ([], [])
        self._clock = _Clock()  #: the current update's part timings

    def shuffle_state(self) -> dict[str, Any]:
        """The per-epoch mini-batch shuffle's generator, for a checkpoint's extra state (exact resume)."""
        return {"update_shuffle_rng": self._rng.get_state()}

    def load_shuffle_state(self, extra: dict[str, Any]) -> None:
        if extra.get("update_shuffle_rng") is not None:
            self._rng.set_state(extra["update_shuffle_rng"])

    def _reference(self) -> Any:
        if hasattr(self.model, "disable_adapter"):
            return None  # LoRA: the reference is the base model with the adapter switched off
        ref = copy.deepcopy(self.model).eval()
        for p in ref.parameters():
            p.requires_grad_(False)
        return ref

    # ---- the update ----------------------------------------------------------------------------
    def update(self, batch: TrainBatch) -> UpdateStats:
        """One update from `batch`.

        With several ranks the leader alone holds the critic and the learned credit models: it computes the
        samples (advantages included), then the followers join the policy epochs with the same samples.
        """
        clock = self._clock = _Clock()
        samples = self._samples(batch)
        stats = UpdateStats(tokens=sum(len(s) for s in samples), action_tokens=sum(s.num_action_tokens for s in samples))
        stats.advantage_abs_mean = _abs_mean([a for s in samples for a, m in zip(s.advantages, s.loss_mask, strict=True) if m])
        stats.credit = credit_diagnostics(self.last_credit, [sum(t.loss_mask) if t.loss_mask is not None
                                                             else len(t.action_ids) for e in batch.episodes
                                                             for t in e.turns], self.cfg.success_reward)
        clock.lap("samples")
        if self.critic is not None:  # the values credit used are the old values of the clipped loss
            groups, old_values = self._critic_pass
            packed = [self._collate([samples[i] for i in g]) for g in groups]
            stats.critic = self.critic.update(packed, old_values).__dict__
            clock.lap("critic")
        training = self.updates_done >= self.cfg.critic_warmup_updates
        self.group.lead("update", samples if training else None)
        if training:
            self._policy_epochs(samples, stats)
            clock.lap("policy")
        if self.credit_models is not None and self.credit_models.active:  # SPA's estimator / OPRL's PRM learn
            stats.credit_model = self.credit_models.update(batch.episodes)
            clock.lap("credit_model")
        self.updates_done += 1
        stats.seconds = time.perf_counter() - clock.started
        stats.parts = clock.parts
        return stats

    def follow_update(self, samples: list[Sample] | None) -> None:
        """A follower's part of the leader's `update`: the policy epochs on the leader's samples (None: critic
        warm-up, no policy step)."""
        if samples is not None:
            self._policy_epochs(samples, UpdateStats())
        self.updates_done += 1

    def _samples(self, batch: TrainBatch) -> list[Sample]:
        episodes = batch.episodes
        values = self._critic_values(episodes) if self.critic is not None else None
        if values is not None:
            self._clock.lap("critic_values")
        result = self.last_credit = self._credit(episodes, values)
        advantages = result.per_episode()
        returns = result.returns_per_episode() if result.returns is not None else None
        return [episode_to_sample(e, adv, weight=w, turn_returns=(returns[k] if returns else ()))
                for k, (e, adv, w) in enumerate(zip(episodes, advantages, batch.weights, strict=True))]

    def _critic_values(self, episodes: Sequence[Episode]) -> list[list[float]]:
        """The critic's value of every turn of `episodes` (one no-grad pass, the weights before this update).

        The pass's micro-batches (as positions in `episodes`) and its value tensors are kept in
        `_critic_pass`: the critic's own update regresses on the same micro-batches with these as its old
        values, so the batch is read by the critic once per update, not twice.
        """
        layout = [episode_to_sample(e, [0.0] * e.num_turns) for e in episodes]
        position = {id(s): k for k, s in enumerate(layout)}
        groups = [[position[id(s)] for s in g] for g in self._groups(layout)]
        tensors = self.critic.values([self._collate([layout[k] for k in g]) for g in groups])
        self._critic_pass = (groups, tensors)
        values: list[list[float]] = [[] for _ in episodes]
        for g, vs in zip(groups, tensors, strict=True):
            flat, i = vs.tolist(), 0
            for k in g:
                turns = len(layout[k].turn_starts)
                values[k], i = flat[i:i + turns], i + turns
        return values

    def _credit(self, episodes: Sequence[Episode], values: list[list[float]] | None) -> CreditResult:
        """Credit assignment by the estimator named in the config (`agentgym.credit.compute_credit`).

        Learned inputs (SPA contributions, OPRL step rewards) come from the credit models as they are
        before this update; critic values are the ones just computed.
        """
        params = dict(self.cfg.estimator_params)
        if self.credit_models is not None and self.credit_models.active:
            params.update(self.credit_models.inputs(episodes))
            self._clock.lap("credit_inputs")
        if values is not None:
            params["values"] = values
        result = compute_credit(self.cfg.estimator, list(episodes), **params)
        self._clock.lap("credit")
        return result

    def _groups(self, samples: list[Sample]) -> list[list[Sample]]:
        ordered = samples if self.cfg.packed else sorted(samples, key=len)
        return micro_batches(ordered, self.cfg.micro_batch_tokens)

    def _collate(self, samples: list[Sample]) -> TokenBatch:
        return collate(samples, packed=self.cfg.packed, pad_id=self.cfg.pad_id).to(self.device)

    def _policy_epochs(self, samples: list[Sample], stats: UpdateStats) -> None:
        ordered = [s for g in self._groups(samples) for s in g]
        tensors = self._fixed_tensors(ordered)
        logs: list[tuple[float, Any]] = []
        objective: list[float] = []
        self._drift: list[tuple[float, float]] = []
        for _ in range(self.cfg.ppo_epochs):  # a fresh sample order, and so fresh mini-batches, every epoch
            order = torch.randperm(len(ordered), generator=self._rng).tolist()  # the same on every rank
            per_mini = max(1, -(-len(order) // self.cfg.mini_batches))
            for start in range(0, len(order), per_mini):
                idx = self._share(order[start:start + per_mini], ordered)
                mini, old, ref = self._lay_out([ordered[i] for i in idx], [tensors[i] for i in idx])
                mini, old, ref = self._pad_passes(mini, old, ref, ordered[order[start]])
                logs += self._mini_batch(mini, old, ref if tensors[0].lp_ref is not None else None, stats, objective)
        names = ("policy_loss", "kl", "entropy", "clip_fraction", "is_weight_mean", "is_dropped_fraction")
        sums = self.group.all_sum([sum(w for w, _ in logs)] + [sum(w * getattr(o, n) for w, o in logs) for n in names]
                                  + [sum(n for n, _ in self._drift), sum(k for _, k in self._drift)])
        total = sums[0] or 1.0
        for name, value in zip(names, sums[1:], strict=False):
            setattr(stats, name, value / total)
        stats.approx_kl_old = sums[-1] / (sums[-2] or 1.0)
        stats.loss = sum(objective) / max(1, len(objective))

    def _share(self, idx: list[int], ordered: list[Sample]) -> list[int]:
        """This rank's part of the samples `idx` (all of them in one process), balanced by tokens."""
        if self.group.world_size == 1:
            return idx
        shares = split_by_tokens([ordered[i] for i in idx], self.group.world_size)
        mine = {id(s) for s in shares[self.group.rank]}
        return [i for i in idx if id(ordered[i]) in mine]

    def _fixed_tensors(self, ordered: list[Sample]) -> list[_SampleTensors]:
        """Loss mask (after the entropy filter), lp_old and lp_ref of every sample, fixed before the epochs.

        Each rank computes its token share of the batch and the ranks exchange the results.
        """
        mine = self._share(list(range(len(ordered))), ordered)
        groups = self._groups([ordered[i] for i in mine])
        batches = [self._collate(g) for g in groups]
        count = int(self.group.all_max([float(len(batches))])[0])
        idle = [self._collate([idle_sample(ordered[0])]) for _ in range(count - len(batches))]
        lp_old, lp_ref, entropy = self._reference_passes(batches + idle)
        lp_old, lp_ref, entropy = lp_old[:len(batches)], lp_ref[:len(batches)], entropy[:len(batches)]
        if self.cfg.top_entropy_fraction is not None:
            _keep_high_entropy(batches, groups, entropy, self.cfg.top_entropy_fraction, self.group)
        local = _per_sample(groups, batches, lp_old, lp_ref or None)
        if self.group.world_size == 1:
            return local
        position = {id(ordered[i]): i for i in mine}
        keys = [position[id(s)] for g in groups for s in g]  # `_groups` may have sorted them by length
        gathered: dict[int, _SampleTensors] = {}
        for part in self.group.all_gather_object({i: t.to("cpu") for i, t in zip(keys, local, strict=True)}):
            gathered.update(part)
        return [gathered[i].to(self.device) for i in range(len(ordered))]

    def _pad_passes(self, batches: list[TokenBatch], old: list[torch.Tensor], ref: list[Any], donor: Sample):
        """Idle micro-batches so that every rank runs as many passes (fsdp2: each forward is a collective)."""
        count = int(self.group.all_max([float(len(batches))])[0])
        while len(batches) < count:
            b = self._collate([idle_sample(donor)])
            batches.append(b)
            old.append(torch.zeros_like(b.loss_mask))
            ref.append(torch.zeros_like(b.loss_mask) if self.cfg.loss.kl != "off" else None)
        return batches, old, ref

    def _lay_out(self, samples: list[Sample], tensors: list[_SampleTensors]):
        """Micro-batches of one mini-batch, with the loss mask and log-probs fixed before the epochs."""
        slot = {id(s): t for s, t in zip(samples, tensors, strict=True)}
        batches, old, ref = [], [], []
        for group in self._groups(samples):
            b = self._collate(group)
            parts = [slot[id(s)] for s in group]
            width = None if self.cfg.packed else max(len(s) for s in group)
            b.loss_mask = _join([p.mask for p in parts], width, 0.0).to(self.device)
            old.append(_join([p.lp_old for p in parts], width, 0.0).to(self.device))
            ref.append(_join([p.lp_ref for p in parts], width, 0.0).to(self.device) if parts[0].lp_ref is not None
                       else None)
            batches.append(b)
        return batches, old, ref

    @torch.no_grad()
    def _reference_passes(self, batches: list[TokenBatch]):
        lp_old, lp_ref, ent = [], [], []
        was_training = self.model.training
        self.model.eval()
        for b in batches:
            out = token_logprobs(self.model, b, temperature=self.cfg.temperature, entropy=True)
            lp_old.append(out.logprobs)
            ent.append(out.entropy)
            if self.cfg.loss.kl != "off":
                ctx = self.model.disable_adapter() if self.reference is None else nullcontext()
                with ctx:
                    ref_model = self.model if self.reference is None else self.reference
                    lp_ref.append(token_logprobs(ref_model, b, temperature=self.cfg.temperature).logprobs)
        self.model.train(was_training)
        return lp_old, lp_ref, ent

    def _mini_batch(self, batches: list[TokenBatch], lp_old: list[torch.Tensor], lp_ref: list[torch.Tensor] | None,
                    stats: UpdateStats, objective: list[float]) -> list[tuple[float, Any]]:
        """One optimizer step: the micro-batch losses, scaled by the *global* counts, sum to the one-process loss."""
        cfg = self.cfg.loss
        seq_mode = cfg.aggregation != "token-mean"
        local = [float(sum(float(b.loss_mask.sum()) for b in batches)), float(sum(_samples_with_tokens(b) for b in batches))]
        n_tokens, n_seqs = (v or 1.0 for v in self.group.all_sum(local))
        max_len = cfg.max_length or int(self.group.all_max([float(max(_longest(b) for b in batches))])[0])
        loss_cfg = LossConfig(**{**cfg.__dict__, "max_length": max_len})
        world = self.group.world_size  # ddp / fsdp2 average gradients over ranks: undo it
        self.optimizer.zero_grad(set_to_none=True)
        logs, contribution = [], 0.0
        for i, b in enumerate(batches):
            with self.strategy.accumulate(sync=i == len(batches) - 1):
                out = token_logprobs(self.strategy.train_module, b, temperature=self.cfg.temperature, entropy=True)
                res = policy_loss(loss_cfg, lp_cur=out.logprobs, lp_old=lp_old[i], advantages=b.advantages,
                                  mask=b.loss_mask, sample_index=b.sample_index, num_samples=b.num_samples,
                                  lp_beh=b.behavior_logprobs, lp_ref=lp_ref[i] if lp_ref else None,
                                  entropy=out.entropy, token_weight=b.token_weight)
                if cfg.aggregation == "seq-mean-token-sum-norm":
                    scale = 1.0
                elif seq_mode:
                    scale = _samples_with_tokens(b) / n_seqs
                else:
                    scale = float(b.loss_mask.sum()) / n_tokens
                (res.loss * (scale * world)).backward()
            contribution += float(res.loss.detach()) * scale
            logs.append((max(res.num_tokens, 0), res))
            with torch.no_grad():  # k3 estimate of KL(pi_old || pi) on the trained tokens: drift within the update
                log_ratio = (out.logprobs - lp_old[i]).float()
                k3 = (log_ratio.exp() - 1 - log_ratio) * b.loss_mask
                self._drift.append((float(b.loss_mask.sum()), float(k3.sum())))
        objective.append(self.group.all_sum([contribution])[0])
        norm = torch.nn.utils.clip_grad_norm_(trainable_parameters(self.model), self.cfg.max_grad_norm)
        stats.grad_norm = grad_norm_value(norm)
        self.optimizer.step()
        self.scheduler.step()
        return logs


@dataclass
class _SampleTensors:
    """One sample's per-token tensors fixed before the epochs: loss mask, lp_old, lp_ref."""

    mask: torch.Tensor
    lp_old: torch.Tensor
    lp_ref: torch.Tensor | None

    def to(self, device: Any) -> _SampleTensors:
        return _SampleTensors(self.mask.to(device), self.lp_old.to(device),
                              self.lp_ref.to(device) if self.lp_ref is not None else None)


def _per_sample(groups: list[list[Sample]], batches: list[TokenBatch], lp_old: list[torch.Tensor],
                lp_ref: list[torch.Tensor] | None) -> list[_SampleTensors]:
    """Cut each micro-batch's flat tensors back into its samples (both layouts start sample i at offsets[i])."""
    out = []
    for k, (group, b) in enumerate(zip(groups, batches, strict=True)):
        for s, off in zip(group, b.offsets, strict=True):
            cut = slice(off, off + len(s))
            out.append(_SampleTensors(b.loss_mask[cut].clone(), lp_old[k][cut],
                                      lp_ref[k][cut] if lp_ref is not None else None))
    return out


def _join(parts: list[torch.Tensor], width: int | None, fill: float) -> torch.Tensor:
    """Per-sample tensors in a batch's flat layout: concatenated (packed) or right-padded rows (padded)."""
    if width is None:
        return torch.cat(parts)
    return torch.cat([torch.nn.functional.pad(p, (0, width - len(p)), value=fill) for p in parts])


def _samples_with_tokens(b: TokenBatch) -> int:
    counts = torch.zeros(b.num_samples, device=b.loss_mask.device).index_add(0, b.sample_index, b.loss_mask)
    return int((counts > 0).sum())


def _longest(b: TokenBatch) -> int:
    counts = torch.zeros(b.num_samples, device=b.loss_mask.device).index_add(0, b.sample_index, b.loss_mask)
    return int(counts.max()) if counts.numel() else 1


def _abs_mean(values: list[float]) -> float:
    return sum(abs(v) for v in values) / len(values) if values else 0.0


def _keep_high_entropy(batches: list[TokenBatch], groups: list[list[Sample]], entropy: list[torch.Tensor],
                       fraction: float, ranks: RankGroup | None = None) -> None:
    """Zero the loss mask of every turn outside the top `fraction` by mean token entropy (in place).

    The top fraction is taken over the whole batch: each rank's turn entropies are gathered in rank order.
    """
    spans: list[tuple[int, int, int]] = []  # (batch, start, end) of each turn's action tokens
    means: list[float] = []
    for bi, (group, ent) in enumerate(zip(groups, entropy, strict=True)):
        for s, offset in zip(group, batches[bi].offsets, strict=True):
            for start, length in zip(s.turn_starts, s.turn_lengths, strict=True):
                a, z = offset + start, offset + start + length
                m = batches[bi].loss_mask[a:z]
                if length and float(m.sum()) > 0:
                    spans.append((bi, a, z))
                    means.append(float((ent[a:z] * m).sum() / m.sum()))
    ranks = ranks or RankGroup()
    gathered = ranks.all_gather_object(means)
    offset = sum(len(m) for m in gathered[:ranks.rank])
    keeps = select_high_entropy_steps([m for ms in gathered for m in ms], fraction)[offset:offset + len(means)]
    for (bi, a, z), keep in zip(spans, keeps, strict=True):
        if not keep:
            batches[bi].loss_mask[a:z] = 0
