"""The SFT warm start: demonstrations are cut by the run's context window, and micro-batching a step
gives the gradient of one batch over every demonstration."""

from __future__ import annotations

import asyncio
import copy

import pytest
import torch
from agentgym.trainer.sft import collect_demonstrations, sft

from agentgym.collector.window import ContextWindow
from agentgym.policy.models import load_model, tiny_model_dir
from agentgym.policy.prompts import prompt_tokenizer

MAZE = {"difficulty": "open", "max_turns": 10}


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    model, tokenizer = load_model(tiny_model_dir())
    return model, prompt_tokenizer(tokenizer, False)


def _demos(tokenizer, context=None):
    tasks = [f"open-{i}" for i in range(4)]
    return asyncio.run(collect_demonstrations("Maze-v0", MAZE, tokenizer, tasks, max_turns=None, seed=0,
                                              context=context))


def test_demonstrations_are_cut_by_the_runs_context_window(tiny):
    _, tokenizer = tiny
    full = _demos(tokenizer)
    windowed = _demos(tokenizer, {"context_window": ContextWindow(keep_turns=0)})
    assert [e.num_turns for e in windowed] == [e.num_turns for e in full]
    assert not any(t.info.get("context") for e in full for t in e.turns)
    for ep in windowed:  # from the third turn on, only the task and the new observation are in the prompt
        assert [t.index for t in ep.turns if t.info.get("context")] == list(range(2, ep.num_turns))


def test_micro_batched_steps_match_one_batch(tiny):
    model, tokenizer = tiny
    demos = _demos(tokenizer)
    one, split = copy.deepcopy(model), copy.deepcopy(model)
    a = sft(one, demos, steps=2, lr=0.003, seed=0, packed=True, micro_batch_tokens=10**9)
    b = sft(split, demos, steps=2, lr=0.003, seed=0, packed=True, micro_batch_tokens=64)
    assert a.first_loss == pytest.approx(b.first_loss, rel=1e-5)
    for p, q in zip(one.parameters(), split.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=1e-4, atol=1e-5)


def test_demonstration_batches_cover_every_demonstration_each_epoch(tiny, monkeypatch):
    """`batch_episodes`: each step trains that many demonstrations, every one once per epoch; a batch as large as
    the demonstrations is the full-batch step exactly."""
    import agentgym.trainer.sft as sft_module

    model, tokenizer = tiny
    demos = _demos(tokenizer)
    seen: list[list[int]] = []
    real = sft_module._rank_micro_batches

    def spy(samples, *args, **kwargs):
        seen.append(sorted(id(s) for s in samples))
        return real(samples, *args, **kwargs)

    monkeypatch.setattr(sft_module, "_rank_micro_batches", spy)
    stats = sft(copy.deepcopy(model), demos, steps=4, lr=0.003, seed=0, batch_episodes=2)
    assert [len(s) for s in seen] == [2, 2, 2, 2] and stats.steps == 4
    for epoch in (seen[:2], seen[2:]):  # 4 demonstrations, 2 per step: each epoch is 2 steps covering all 4
        assert len({i for step in epoch for i in step}) == len(demos) == 4
    monkeypatch.setattr(sft_module, "_rank_micro_batches", real)
    full, batched = copy.deepcopy(model), copy.deepcopy(model)
    a = sft(full, demos, steps=2, lr=0.003, seed=0)
    b = sft(batched, demos, steps=2, lr=0.003, seed=0, batch_episodes=len(demos))
    assert a.last_loss == b.last_loss
    for p, q in zip(full.parameters(), batched.parameters(), strict=True):
        torch.testing.assert_close(p, q)
