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
