"""Batched sampling rules (top-k, top-p, greedy, seeds) and the scripted/simulated backends."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")

from agentgym.errors import ConfigError  # noqa: E402
from agentgym.policy.base import FinishReason, GenerationRequest, SamplingParams  # noqa: E402
from agentgym.policy.sampling import RowSampler, make_generator, sample_rows  # noqa: E402
from agentgym.policy.scripted import ScriptedBackend, SimulatedBackend  # noqa: E402


def draws(params: SamplingParams, logits: torch.Tensor, n: int = 400) -> set[int]:
    shared = torch.Generator().manual_seed(0)
    rows = [RowSampler(params, None)] * n
    tokens, _ = sample_rows(logits.expand(n, -1), rows, shared)
    return set(tokens.tolist())


def test_top_k_top_p_and_greedy_keep_only_the_allowed_tokens():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.1, 0.06, 0.04]]))
    assert draws(SamplingParams(top_k=2), logits) == {0, 1}
    assert draws(SamplingParams(top_p=0.85), logits) == {0, 1, 2}  # 0.5 + 0.3 < 0.85 <= 0.9
    assert draws(SamplingParams(temperature=0), logits) == {0}
    assert draws(SamplingParams(), logits) == {0, 1, 2, 3, 4}


def test_rows_with_a_seed_are_reproducible_whatever_the_batch():
    logits = torch.randn(1, 50)
    seeded = SamplingParams(seed=42)
    alone, _ = sample_rows(logits, [RowSampler(seeded, make_generator(42, "cpu"))], torch.Generator())
    rows = [RowSampler(SamplingParams(), None), RowSampler(seeded, make_generator(42, "cpu"))]
    batch, logps = sample_rows(logits.expand(2, -1), rows, torch.Generator().manual_seed(5))
    assert batch[1] == alone[0]
    assert logps[1] == pytest.approx(torch.log_softmax(logits[0], -1)[alone[0]].item())


def test_sampling_params_validate_with_the_fix_in_the_message():
    with pytest.raises(ConfigError, match="top_p must be in"):
        SamplingParams(top_p=0)
    with pytest.raises(ConfigError, match="max_new_tokens must be >= 1"):
        SamplingParams(max_new_tokens=0)
    assert SamplingParams(stop="x").stop == ("x",)


async def test_scripted_backend_tokenizes_its_text_and_says_it_is_scripted(tokenizer):
    backend = ScriptedBackend(lambda messages: f"echo {len(messages)}", tokenizer=tokenizer)
    [done] = await backend.generate([GenerationRequest("e", messages=[{"role": "user", "content": "hi"}])])
    assert done.text == "echo 1" and done.source == "scripted"
    assert done.token_ids == tokenizer.encode("echo 1", add_special_tokens=False) + [tokenizer.eos_token_id]
    assert done.logprobs == [0.0] * len(done.token_ids)


async def test_simulated_backend_aborts_mid_turn_and_continues_where_it_stopped():
    backend = SimulatedBackend(lambda m: "inc", lambda rng: 200, token_seconds=1e-3)
    task = asyncio.ensure_future(backend.generate([GenerationRequest("e")]))
    await asyncio.sleep(0.05)
    backend.abort(["e"])
    [first] = await task
    assert first.finish_reason == FinishReason.ABORT and 0 < len(first.token_ids) < 200 and first.text == ""
    backend.update_weights(None)
    [rest] = await backend.generate([GenerationRequest("e", sampling=SamplingParams(max_new_tokens=1000))])
    assert rest.finish_reason == FinishReason.STOP and rest.text == "inc" and rest.version == 1
    assert first.token_ids + rest.token_ids == list(range(200))
