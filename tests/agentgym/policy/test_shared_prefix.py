"""Segments that begin alike read their common prefix once (`agentgym.policy.shared_prefix`): the outputs and
gradients are those of reading every row whole, on right-padded rows, on windowed episodes through the trainer's
forward, and in the learned credit models."""

from __future__ import annotations

import pytest
import torch
from agentgym.trainer import forward
from agentgym.trainer.forward import token_logprobs
from agentgym.trainer.packing import episode_to_sample, pack, segment_rows

from agentgym.collector.window import ContextWindow
from agentgym.policy import shared_prefix
from agentgym.policy.models import cache_keyword, load_model, tiny_model_dir
from agentgym.policy.shared_prefix import can_share, plan_prefixes, shared_prefix_forward
from tests.helpers.windowed import collect_maze


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model, tokenizer = load_model(tiny_model_dir())
    return model.float(), tokenizer


def rows_of(specs, vocab, seed=0):
    """Right-padded rows from (sample, head, shared prefix tokens, own tokens) specs: rows of one head begin with
    the same `prefix` tokens."""
    gen = torch.Generator().manual_seed(seed)
    heads: dict[int, torch.Tensor] = {}
    seqs, keys = [], []
    for sample, head_id, prefix, own in specs:
        head = heads.setdefault(head_id, torch.randint(vocab, (64,), generator=gen))
        seqs.append(torch.cat([head[:prefix], torch.randint(vocab, (own,), generator=gen)]))
        keys.append(sample)
    width = max(len(s) for s in seqs)
    ids = torch.zeros((len(seqs), width), dtype=torch.long)
    real = torch.zeros((len(seqs), width), dtype=torch.bool)
    for r, s in enumerate(seqs):
        ids[r, : len(s)], real[r, : len(s)] = s, True
    return ids, real, torch.tensor(keys)


def same_gradient(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal up to float rounding on the gradient's own scale (the sums run in another order)."""
    return float((a - b).abs().max()) <= 1e-3 * float(a.abs().max())


def whole(model, ids, real):
    pos = (real.long().cumsum(1) - 1).clamp(min=0) * real
    out = model(input_ids=ids, position_ids=pos, attention_mask=real.long(), use_cache=False, output_hidden_states=True)
    return [out.logits, out.hidden_states[-1]]


def test_rows_read_through_their_groups_prefix_give_their_own_outputs_and_gradients(tiny):
    model, _ = tiny
    vocab = model.config.vocab_size
    # sample 0: three rows on 40 common tokens (one shorter); sample 1: two rows on 36 (their own prefix length);
    # sample 2: one row (nothing to share); sample 3: two rows on 10 common tokens (below the minimum: alone);
    # samples 4 and 5: one row each, beginning with the same 45 tokens (two rollouts of one task)
    ids, real, keys = rows_of([(0, 0, 40, 9), (1, 1, 36, 20), (0, 0, 40, 3), (2, 2, 50, 5), (4, 4, 45, 6),
                               (0, 0, 40, 17), (3, 3, 10, 30), (1, 1, 36, 1), (3, 3, 10, 12), (5, 4, 45, 8)], vocab)
    plan = plan_prefixes(ids, real.sum(1), keys)
    assert plan is not None and sorted(plan.length.tolist()) == [36, 40, 45]
    assert plan.group.tolist().count(-1) == 3  # the lone row and sample 3's two rows run whole

    outputs, grads = [], []
    for shared in (False, True):
        model.zero_grad()
        if shared:
            picked = shared_prefix_forward(lambda **kw: model(**kw, output_hidden_states=True),
                                           lambda o: [o.logits, o.hidden_states[-1]], ids, real, plan,
                                           cache_keyword(model))
        else:
            picked = whole(model, ids, real)
        weights = torch.linspace(0.5, 1.5, picked[0].shape[-1])
        ((picked[0] * weights).sum(-1)[real].sum() + picked[1][real].pow(2).mean()).backward()
        outputs.append([t[real].detach() for t in picked])
        grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
    for a, b in zip(*outputs, strict=True):
        assert torch.allclose(a, b, atol=1e-4), (a - b).abs().max()
    for name, g in grads[0].items():
        assert same_gradient(g, grads[1][name]), name


def test_a_plan_keeps_a_suffix_in_every_row_and_needs_a_group_that_shares_enough():
    ids = torch.arange(40).repeat(3, 1)  # three identical rows of 40 tokens
    real = torch.ones_like(ids, dtype=torch.bool)
    plan = plan_prefixes(ids, real.sum(1), torch.tensor([0, 0, 0]))
    assert plan.length.tolist() == [39] and plan.group.tolist() == [0, 0, 0]
    # three samples of one context each that begin alike (the rollouts of one task) share across samples
    across = plan_prefixes(ids, real.sum(1), torch.tensor([0, 1, 2]))
    assert across.length.tolist() == [39] and across.group.tolist() == [0, 0, 0]
    assert plan_prefixes(ids, real.sum(1), torch.tensor([0, 0, 1]), min_prefix=40) is None
    other = ids.clone()
    other[2, 5] += 1  # the third row differs early: the first two share, the third runs alone
    two = plan_prefixes(other, real.sum(1), torch.tensor([0, 1, 2]))
    assert two.group.tolist() == [0, 0, -1] and two.length.tolist() == [39]
    assert plan_prefixes(other[1:], real[1:].sum(1), torch.tensor([1, 2])) is None


def test_gradient_checkpointing_turns_sharing_off(tiny):
    model, _ = tiny
    assert can_share(model)
    on = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
    off = getattr(model, "activation_checkpointing_disable", None) or model.gradient_checkpointing_disable
    on()
    try:
        assert not can_share(model)
    finally:
        off()
    assert can_share(model)


def _windowed_episodes(model, tokenizer):
    episodes = collect_maze(model, tokenizer, ContextWindow(keep_turns=0), tasks=4, check_template=False)
    return [e for e in episodes if e.num_turns >= 3]


def test_windowed_episodes_train_on_the_same_log_probs_and_gradients_with_a_shared_prefix(tiny, monkeypatch):
    """Every turn of a `keep_turns: 0` episode re-renders the system prompt and the task: the trainer's forward
    reads them once per episode, with the log-probs, entropies and gradients of reading each turn whole."""
    model, tokenizer = tiny
    episodes = _windowed_episodes(model, tokenizer)
    assert episodes, "the tiny random model should wander for several turns"
    batch = pack([episode_to_sample(e, [1.0] * e.num_turns) for e in episodes])
    rows = segment_rows(batch)
    plan = plan_prefixes(rows.input_ids, rows.attention_mask.sum(1), rows.row_sample)
    assert plan is not None and int(plan.length.min()) > 100  # the system prompt and the task at least

    calls: list[bool] = []
    original = model.forward
    monkeypatch.setattr(model, "forward", lambda *a, **kw: calls.append(any(
        kw.get(k) is not None for k in ("cache", "past_key_values"))) or original(*a, **kw))
    monkeypatch.setattr(shared_prefix, "cache_keyword", lambda m: cache_keyword(type(m)))
    results = []
    for share in (False, True):
        monkeypatch.setattr(forward, "SHARE_PREFIX", share)
        model.zero_grad()
        out = token_logprobs(model, batch, entropy=True)
        (-(out.logprobs * batch.loss_mask).sum() - out.entropy.sum()).backward()
        results.append((out.logprobs.detach(), out.entropy.detach(),
                        {n: p.grad.clone() for n, p in model.named_parameters()}))
    assert calls == [False, False, True]  # whole rows; then the prefixes, and the suffixes on their cache
    (lp_a, ent_a, g_a), (lp_b, ent_b, g_b) = results
    mask = batch.loss_mask > 0
    assert torch.allclose(lp_a[mask], lp_b[mask], atol=1e-5) and torch.allclose(ent_a[mask], ent_b[mask], atol=1e-4)
    assert torch.allclose(lp_b[mask], batch.behavior_logprobs[mask], atol=2e-4)  # still the sampler's own
    for name, g in g_a.items():
        assert same_gradient(g, g_b[name]), name


def test_the_learned_credit_models_read_an_episodes_turns_through_its_shared_prefix(tiny, monkeypatch):
    from agentgym.credit.learned import backbone

    model, tokenizer = tiny
    episodes = _windowed_episodes(model, tokenizer)
    packed = [backbone.pack_episode(e, 8192) for e in episodes]
    assert all(p.segment_starts for p in packed)
    hidden = []
    for share in (False, True):
        monkeypatch.setattr(shared_prefix, "can_share", lambda m, share=share: share)
        model.zero_grad()
        h, _ = backbone.hidden_states(model, packed)
        ends = backbone.gather_rows(h, [p.turn_ends for p in packed])
        ends.pow(2).mean().backward()
        hidden.append((ends.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (a, ga), (b, gb) = hidden
    assert torch.allclose(a, b, atol=1e-4), (a - b).abs().max()
    assert len(ga) == len(gb) > 0
    for x, y in zip(ga, gb, strict=True):
        assert same_gradient(x, y)
