"""The hf backend: batching, KV reuse, exact log-probs, stops, aborts, weight updates."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")

from agentgym.policy.base import FinishReason, GenerationRequest, SamplingParams  # noqa: E402
from agentgym.policy.hf import HFBackend  # noqa: E402


@pytest.fixture(scope="module")
def backend(tiny_dir):
    return HFBackend.from_pretrained(tiny_dir)


def chat_ids(tokenizer, text):
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                         add_generation_prompt=True, return_dict=False)


def requests(tokenizer, n, sampling, prefix="e"):
    return [GenerationRequest(f"{prefix}{i}", prompt_ids=chat_ids(tokenizer, "go " * (i + 1)), sampling=sampling)
            for i in range(n)]


async def test_a_batch_of_episodes_equals_each_alone_and_logprobs_follow_the_convention(tiny_dir, tokenizer):
    sampling = SamplingParams(max_new_tokens=10, seed=4, temperature=0.7, top_k=50, top_p=0.9)
    batched = await HFBackend.from_pretrained(tiny_dir).generate(requests(tokenizer, 4, sampling))
    alone = HFBackend.from_pretrained(tiny_dir)
    for request, got in zip(requests(tokenizer, 4, sampling), batched, strict=True):
        [want] = await alone.generate([request])
        assert got.token_ids == want.token_ids
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-5)
        # log_softmax(logits / T) over the full vocabulary, before top-k/top-p
        with torch.no_grad():
            logits = alone.model(torch.tensor([request.prompt_ids + got.token_ids])).logits[0]
        steps = logits[len(request.prompt_ids) - 1:-1] / 0.7
        expected = torch.log_softmax(steps, -1).gather(1, torch.tensor(got.token_ids)[:, None])[:, 0]
        assert got.logprobs == pytest.approx(expected.tolist(), abs=1e-4)


async def test_kv_cache_is_reused_between_turns_and_freed_on_release(tiny_dir, tokenizer):
    reuse, naive = HFBackend.from_pretrained(tiny_dir), HFBackend.from_pretrained(tiny_dir, reuse_cache=False)
    sampling = SamplingParams(max_new_tokens=6, seed=9)
    first = chat_ids(tokenizer, "start")
    [a] = await reuse.generate([GenerationRequest("ep", prompt_ids=first, sampling=sampling)])
    observation = tokenizer.encode("\n<|im_start|>user\nmoved<|im_end|>\n<|im_start|>assistant\n")
    second = first + a.token_ids + observation
    [b] = await reuse.generate([GenerationRequest("ep", prompt_ids=second, sampling=sampling)])
    [c] = await naive.generate([GenerationRequest("ep", prompt_ids=second, sampling=sampling)])
    assert b.prefilled_tokens == len(observation) + 1  # the new observation and the last sampled token
    assert c.prefilled_tokens == len(second)
    assert b.token_ids == c.token_ids and b.logprobs == pytest.approx(c.logprobs, abs=1e-5)
    assert reuse.cached_episodes == 1
    reuse.release("ep")
    assert reuse.cached_episodes == 0
    # an edited history reuses only the common prefix
    [d] = await reuse.generate([GenerationRequest("ep2", prompt_ids=second, sampling=sampling)])
    edited = second[:10] + [second[10] + 1] + second[11:]
    [e] = await reuse.generate([GenerationRequest("ep2", prompt_ids=edited, sampling=sampling)])
    assert e.prefilled_tokens == len(edited) - 10


async def test_seeds_stops_and_greedy(backend, tokenizer):
    ids = chat_ids(tokenizer, "hello")
    one = SamplingParams(max_new_tokens=12, seed=1)
    [a], [b] = await backend.generate([GenerationRequest("s1", prompt_ids=ids, sampling=one)]), \
        await backend.generate([GenerationRequest("s2", prompt_ids=ids, sampling=one)])
    assert a.token_ids == b.token_ids
    text = tokenizer.decode(a.token_ids[:3])
    stop = SamplingParams(max_new_tokens=12, seed=1, stop=(text[-1],))
    [c] = await backend.generate([GenerationRequest("s3", prompt_ids=ids, sampling=stop)])
    assert c.finish_reason == FinishReason.STOP and len(c.token_ids) <= 3
    greedy = SamplingParams(max_new_tokens=5, temperature=0)
    [g1], [g2] = await backend.generate([GenerationRequest("g1", prompt_ids=ids, sampling=greedy)]), \
        await backend.generate([GenerationRequest("g2", prompt_ids=ids, sampling=greedy)])
    assert g1.token_ids == g2.token_ids and g1.finish_reason == FinishReason.LENGTH


async def test_abort_keeps_the_tokens_so_far(backend, tokenizer):
    long = SamplingParams(max_new_tokens=2000, temperature=0)
    task = asyncio.ensure_future(backend.generate(requests(tokenizer, 2, long, prefix="ab")))
    await asyncio.sleep(0.3)
    backend.abort(None)
    done = await task
    assert all(c.finish_reason == FinishReason.ABORT and 0 < len(c.token_ids) < 2000 for c in done)
    assert all(len(c.token_ids) == len(c.logprobs) for c in done)


async def test_update_weights_bumps_the_version_and_drops_caches(tiny_dir, tokenizer, tmp_path):
    backend = HFBackend.from_pretrained(tiny_dir)
    ids = chat_ids(tokenizer, "hi")
    sampling = SamplingParams(max_new_tokens=4, seed=2)
    [before] = await backend.generate([GenerationRequest("w", prompt_ids=ids, sampling=sampling)])
    state = {k: v * 1.5 for k, v in backend.model.state_dict().items() if "mlp" in k}
    assert backend.update_weights(state) == 1 and backend.cached_episodes == 0
    [after] = await backend.generate([GenerationRequest("w", prompt_ids=ids, sampling=sampling)])
    assert after.version == 1 and after.logprobs != before.logprobs
    backend.model.save_pretrained(tmp_path)
    assert backend.update_weights(tmp_path, version=7) == 7
    with pytest.raises(Exception, match="keys the model does not have"):
        backend.update_weights({"nope.weight": torch.zeros(1)})
    with pytest.raises(Exception, match="must not go backwards"):
        backend.update_weights(state, version=3)


async def test_context_overflow_is_a_clear_non_transient_error(backend, tokenizer):
    from agentgym.policy.base import BackendError

    too_long = chat_ids(tokenizer, "x") * 1000
    with pytest.raises(BackendError, match="leaves no room") as err:
        await backend.generate([GenerationRequest("big", prompt_ids=too_long)])
    assert not err.value.transient


def test_models_load_with_hub_kernels_off_unless_the_user_turns_them_on(tiny_dir, monkeypatch):
    """transformers 5 kernelizes at load by default, fetching kernels from the hub on a GPU (an offline GPU
    machine then cannot load any model); agentgym's loader keeps them off, and USE_HUB_KERNELS hands the
    choice back to transformers."""
    import transformers

    from agentgym.policy.models import hub_kernel_kwargs, load_model

    monkeypatch.delenv("USE_HUB_KERNELS", raising=False)
    model, _ = load_model(tiny_dir)
    assert not getattr(model, "use_kernels", False)
    if hub_kernel_kwargs(transformers):  # transformers 5 and later
        assert hub_kernel_kwargs(transformers) == {"use_kernels": False}
        monkeypatch.setenv("USE_HUB_KERNELS", "YES")
        assert hub_kernel_kwargs(transformers) == {}
        model, _ = load_model(tiny_dir)
        assert model.use_kernels  # transformers' own default, on this CPU a no-op
