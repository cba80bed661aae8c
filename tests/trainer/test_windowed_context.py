"""Long-horizon context: a window keeps the task and the last turns, marks what it dropped, and training on
windowed episodes reads exactly the stored tokens in exactly the context the model sampled in."""

from __future__ import annotations

import pytest
import torch
from agentgym.trainer.forward import token_logprobs
from agentgym.trainer.packing import episode_to_sample, pack, pad, positions

from agentgym.collector.window import ContextWindow
from agentgym.policy.models import load_model, tiny_model_dir
from tests.helpers.windowed import collect_maze


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return load_model(tiny_model_dir())


def test_a_window_keeps_task_and_last_turns_and_counts_every_cut(tiny):
    model, tokenizer = tiny
    episodes = collect_maze(model, tokenizer, ContextWindow(keep_turns=1))
    long = [e for e in episodes if e.num_turns >= 4]
    assert long, "the tiny random model should wander for several turns"
    for ep in long:
        cuts = [t for t in ep.turns if t.info.get("context")]
        assert [t.index for t in cuts] == list(range(3, ep.num_turns))  # task + 1 earlier turn kept from turn 3 on
        text = tokenizer.decode(cuts[0].prompt_ids)
        assert ep.turns[0].observation in text and ep.turns[2].observation in text  # task and the last turn kept
        assert ep.turns[1].observation not in text and "[... 1 earlier turns omitted ...]" in text
        assert ep.metadata["context"]["windowed_turns"] == len(cuts)
        assert ep.metadata["context"]["dropped_tokens"] == sum(t.info["context"]["dropped_tokens"] for t in cuts) > 0
        check = ep.metadata["template_check"]  # the drift check runs on the current (windowed) context:
        # its prompt ids are the template's own; only the random tiny model's sampled byte soup may retokenize
        assert check["append_only"] or (check["first_diff_part"] == "action" and check["kind"] == "retokenization")


def test_training_on_windowed_episodes_reads_exactly_the_stored_tokens(tiny):
    model, tokenizer = tiny
    episodes = [e for e in collect_maze(model, tokenizer, ContextWindow(keep_turns=1)) if e.num_turns >= 4]
    samples = [episode_to_sample(e, [1.0] * e.num_turns) for e in episodes]
    assert all(s.segment_starts for s in samples)
    batch = pack(samples)
    with torch.no_grad():
        recomputed = token_logprobs(model, batch).logprobs
    mask = batch.loss_mask > 0
    behavior = batch.behavior_logprobs[mask]
    # the trainer's log-probs of the stored action ids, in the stored windowed contexts, are the sampler's own
    assert torch.allclose(recomputed[mask], behavior, atol=2e-4), (recomputed[mask] - behavior).abs().max()
    # one training step on exactly those tokens: the gradient flows from the windowed sequences
    model.zero_grad()
    loss = -(token_logprobs(model, batch).logprobs * batch.loss_mask).sum()
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    model.zero_grad()
    # reading the whole episode as one context instead (no segments) would train on other contexts
    flat = pack(samples)
    flat.position_ids = torch.cat([torch.arange(len(s)) for s in samples]).unsqueeze(0)
    for s in samples:
        s.segment_starts = []
    with torch.no_grad():
        wrong = token_logprobs(model, pack(samples)).logprobs
    assert not torch.allclose(wrong[mask], behavior, atol=2e-4)


def test_positions_restart_per_segment_and_padding_refuses_windowed_episodes(tiny):
    model, tokenizer = tiny
    [ep, *_] = [e for e in collect_maze(model, tokenizer, ContextWindow(keep_turns=1)) if e.num_turns >= 4]
    sample = episode_to_sample(ep, [0.0] * ep.num_turns)
    pos = positions(sample)
    assert all(int(pos[s]) == 0 for s in sample.segment_starts) and int(pos[0]) == 0
    with pytest.raises(ValueError, match="only packed batches express"):
        pad([sample], tokenizer.pad_token_id)


def test_token_budget_and_prompt_budget(tiny):
    model, tokenizer = tiny
    for ep in collect_maze(model, tokenizer, None, budget=6):
        assert ep.num_action_tokens <= 6
        if ep.status == "truncated" and ep.num_action_tokens == 6:
            assert "episode token budget" in ep.error
    budget = 400  # the system prompt with the tool schema and the task take ~330 tokens: a few turns fit
    windowed = collect_maze(model, tokenizer, ContextWindow(max_prompt_tokens=budget))
    assert any(t.info.get("context") for ep in windowed for t in ep.turns)
    for ep in windowed:
        context = len(ep.turns[0].prompt_ids) + len(ep.turns[0].action_ids)
        for turn in ep.turns[1:]:
            context = len(turn.prompt_ids) if turn.info.get("context") else context + len(turn.prompt_ids)
            # within budget, or every earlier turn but the task already dropped (the task is always kept)
            assert context <= budget or turn.info["context"]["dropped_turns"] == turn.index - 1
            context += len(turn.action_ids)
