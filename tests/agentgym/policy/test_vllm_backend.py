"""The vllm backend: a clear error without the extra, and a real vLLM engine in its own venv.

The engine test needs vLLM, which lives in a separate venv on CPU machines
(``scripts/vllm-venv.sh`` creates ``.venv-vllm``). From the main venv the
`vllm`-marked test re-runs this file with that venv's python; inside it the
engine test runs directly.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
VLLM_PYTHON = Path(os.environ.get("AGENTGYM_VLLM_PYTHON", ROOT / ".venv-vllm" / "bin" / "python"))
HAVE_VLLM = importlib.util.find_spec("vllm") is not None


@pytest.mark.skipif(HAVE_VLLM, reason="vLLM is installed here; the error path needs it absent")
def test_without_vllm_the_error_names_the_extra():
    from agentgym.errors import MissingExtraError
    from agentgym.policy.vllm import VLLMBackend

    with pytest.raises(MissingExtraError, match=r"pip install 'agentgym\[vllm\]'"):
        VLLMBackend.from_pretrained("any-model")


@pytest.mark.vllm
@pytest.mark.timeout(900)
@pytest.mark.skipif(HAVE_VLLM, reason="vLLM is installed here: the engine test below runs directly")
def test_vllm_engine_in_its_own_venv():
    if not VLLM_PYTHON.exists():
        pytest.fail(f"{VLLM_PYTHON} is missing: run scripts/vllm-venv.sh (or set AGENTGYM_VLLM_PYTHON)")
    proc = subprocess.run([str(VLLM_PYTHON), "-m", "pytest", __file__, "-q", "-x", "-p", "no:cacheprovider",
                           "-k", "test_engine_"], cwd=ROOT, capture_output=True, text=True, timeout=850,
                          env={**os.environ, "VLLM_ENABLE_V1_MULTIPROCESSING": "0"})
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert proc.returncode == 0, tail
    assert "1 passed" in proc.stdout, tail


def tiny_engine_model() -> str:
    from agentgym.policy.models import TinyModelSpec, tiny_model_dir

    # vLLM's CPU attention needs head_dim >= 32: a tiny model with head_dim 64
    return tiny_model_dir(TinyModelSpec(hidden_size=128, num_heads=2, num_kv_heads=1, intermediate_size=256,
                                        max_positions=2048))


def model_logprobs(model, prompt: list[int], ids: list[int], temperature: float):
    """The log-probs `model` gives the tokens `ids` after `prompt` (temperature-scaled softmax)."""
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1:-1]
    return torch.log_softmax(logits / temperature, dim=-1).gather(1, torch.tensor(ids)[:, None])[:, 0]


@pytest.mark.vllm
@pytest.mark.timeout(900)
@pytest.mark.skipif(not HAVE_VLLM, reason="needs vLLM (runs inside .venv-vllm via the test above)")
async def test_engine_generates_exact_ids_collects_aborts_and_takes_weights_in_memory_and_from_a_state():
    """One engine (a start is most of this test's time): exact ids and log-probs, the collector on Maze, abort,
    weights pushed through a process group, then a state dict loaded in place."""
    import asyncio

    import torch
    from agentgym.trainer.sync_vllm import VLLMProcessGroupSync

    from agentgym.collector import Collector, Task
    from agentgym.policy.base import FinishReason, GenerationRequest, SamplingParams
    from agentgym.policy.models import load_model
    from agentgym.policy.vllm import VLLMBackend
    from agentgym.policy.vllm_weights import EXTENSION
    from agentgym.trajectory import EpisodeStatus

    path = tiny_engine_model()
    backend = VLLMBackend.from_pretrained(path, max_model_len=1024, dtype="float32", enforce_eager=True,
                                          max_num_seqs=32, kv_cache_memory_bytes=256 * 2**20,
                                          worker_extension_cls=EXTENSION)
    try:
        # -- exact ids and log-probs that match the model (temperature-scaled softmax)
        prompt = backend.tokenizer.apply_chat_template([{"role": "user", "content": "up or down?"}], tokenize=True,
                                                       add_generation_prompt=True, return_dict=False)
        sampling = SamplingParams(temperature=0.7, max_new_tokens=8, seed=3)
        [done] = await backend.generate([GenerationRequest("e1", prompt_ids=prompt, sampling=sampling)])
        assert 1 <= len(done.token_ids) == len(done.logprobs) and done.version == 0
        start, _ = load_model(path, dtype=torch.float32)
        expected = model_logprobs(start, prompt, done.token_ids, 0.7)
        assert torch.allclose(torch.tensor(done.logprobs), expected, atol=2e-3)

        # -- the collector drives Maze with it; the ids the engine saw are the recorded ones
        collector = Collector("Maze-v0", backend, progress=False, max_turns=3,
                              sampling=SamplingParams(max_new_tokens=6, seed=1))
        result = await collector.collect([Task("easy-1", seed=0)], group_size=4)
        assert len(result.episodes) == 4
        for episode in result.episodes:
            assert episode.status == EpisodeStatus.TRUNCATED and episode.num_turns == 3
            assert all(len(t.action_ids) == len(t.action_logprobs) > 0 for t in episode.turns)

        # -- abort keeps the tokens generated so far
        long = SamplingParams(max_new_tokens=900, temperature=1.0, seed=5)
        pending = [GenerationRequest(f"a{i}", prompt_ids=prompt, sampling=long) for i in range(4)]
        task = asyncio.ensure_future(backend.generate(pending))
        await asyncio.sleep(0.5)
        backend.abort(None)
        aborted = await task
        assert any(c.finish_reason in (FinishReason.ABORT, FinishReason.STOP) for c in aborted)

        # -- weights pushed in memory through a process group (gloo on this CPU build, NCCL on GPUs): the buckets
        # cross in memory, no file is written; one group, several pushes
        trainer, _ = load_model(path, dtype=torch.float32)
        with torch.no_grad():  # the trainer's weights move away from the engine's
            for name, param in trainer.named_parameters():
                param.add_(torch.randn_like(param) * 0.05 if "mlp" in name or "embed" in name else 0)
        sync = VLLMProcessGroupSync(backend, loop=asyncio.get_running_loop(), timeout_s=300, bucket_bytes=64 << 10)
        for version, model in ((1, trainer), (2, start), (3, trainer)):
            assert await asyncio.to_thread(sync.push, model, version) == version
            [pushed] = await backend.generate([GenerationRequest(f"e{version}", prompt_ids=prompt,
                                                                 sampling=sampling)])
            assert pushed.version == version
            got = torch.tensor(pushed.logprobs)
            assert torch.allclose(got, model_logprobs(model, prompt, pushed.token_ids, 0.7), atol=2e-3)
            other = start if model is trainer else trainer
            assert not torch.allclose(got, model_logprobs(other, prompt, pushed.token_ids, 0.7), atol=2e-3)

        # -- a state dict loaded in place: the version bumps and the log-probs of the same tokens change
        state = {k: v * 1.5 if "mlp" in k else v for k, v in start.state_dict().items()}
        assert await backend.aupdate_weights(state) == 4
        [again] = await backend.generate([GenerationRequest("e5", prompt_ids=prompt, sampling=sampling)])
        assert again.version == 4 and again.logprobs != done.logprobs
    finally:
        await backend.aclose()
