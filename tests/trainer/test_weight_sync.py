"""Save-and-reload weight sync against a real `agentgym serve` server in a subprocess."""

from __future__ import annotations

import pytest
import torch

httpx = pytest.importorskip("httpx")
pytest.importorskip("uvicorn")

from agentgym.trainer.model import ModelSpec, build_model  # noqa: E402
from agentgym.trainer.weight_sync import SaveAndReloadSync  # noqa: E402

from agentgym.launch import serve_model  # noqa: E402
from agentgym.policy.base import GenerationRequest, SamplingParams  # noqa: E402
from agentgym.policy.openai import OpenAIBackend  # noqa: E402


@pytest.fixture
def server(tiny_dir):
    with serve_model(tiny_dir) as served:
        yield served.url


async def greedy(backend: OpenAIBackend, ids: list[int]) -> list[int]:
    request = GenerationRequest("e", prompt_ids=ids, sampling=SamplingParams(temperature=0, max_new_tokens=6))
    (completion,) = await backend.generate([request])
    return completion.token_ids


async def test_save_and_reload_reaches_the_server_and_bumps_the_version(server, tmp_path):
    model, tok = build_model(ModelSpec())
    async with OpenAIBackend(f"{server}/v1", tokenizer=tok) as backend:
        text = tok.apply_chat_template([{"role": "user", "content": "Goal: 2 down. Open: down."}],
                                       add_generation_prompt=True, tokenize=False)
        prompt = tok.encode(text, add_special_tokens=False)
        before = await greedy(backend, prompt)
        with torch.no_grad():
            model.model.norm.weight.mul_(-1.0)  # logits negated: the greedy token becomes the least likely one
        sync = SaveAndReloadSync(backend, tmp_path / "weights", tok)
        assert await __import__("asyncio").to_thread(sync.push, model, 1) == 1
        assert backend.version == 1 and (tmp_path / "weights" / "v000001" / "config.json").exists()
        assert await greedy(backend, prompt) != before


def test_every_sync_is_a_weight_sync_and_only_loop_driven_ones_keep_the_bound_loop(tmp_path):
    import asyncio

    from agentgym.trainer.ray_runtime.trainer_actor import RayWeightSync
    from agentgym.trainer.sync_shared_memory import SharedMemorySync
    from agentgym.trainer.weight_sync import InProcessSync, WeightSync

    loop = asyncio.new_event_loop()
    try:
        reloading = SaveAndReloadSync(None, tmp_path)
        for sync in (reloading, InProcessSync(None), RayWeightSync([]), SharedMemorySync(["http://127.0.0.1:1/v1"])):
            assert isinstance(sync, WeightSync)
            sync.bind(loop)
        assert reloading.loop is loop
    finally:
        loop.close()
