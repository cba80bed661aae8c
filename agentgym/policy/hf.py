"""The `hf` backend: a transformers causal LM on CPU or GPU, with per-episode KV caches.

    backend = HFBackend.from_pretrained(tiny_model_dir())          # or any local dir / hub name
    [c] = await backend.generate([GenerationRequest("ep-1", messages, prompt_ids)])

How it works:

- **Batching.** Concurrent `generate` calls from different episodes are
  gathered for `batch_wait_s` (a few milliseconds) and run as one batch in a
  dedicated worker thread, so the event loop keeps stepping envs meanwhile.
- **KV reuse.** Each episode's KV cache stays between turns, keyed by
  episode id, together with the ids it encodes. A request's context is
  matched against them (longest common prefix) and only the ids past the
  prefix are prefilled, which in a multi-turn episode is just the new
  observation. `release(episode_id)` frees the cache; a weight update drops
  all caches (they were computed by the old weights).
- **One batched forward for rows with different cache lengths.** Row i's
  cache (length c_i) is right-aligned in a [B, H, max c, D] block and its new
  ids (length s_i) right-aligned after it; an attention mask with zeros over
  the gaps and explicit position ids make every row see exactly its own
  context. Decode steps append a column; finished rows are masked. After the
  batch each row's cache is compacted back (the gaps dropped).
- **Own sampling loop** (not `model.generate`), so caches, stop handling,
  aborts and log-probs are under our control; see `agentgym.policy.sampling`
  for the log-prob convention.

Counters (`stats`) say how many context tokens were prefilled versus served
from the cache; `bench/collector.py` reports them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentgym.errors import ConfigError, require
from agentgym.policy.base import Backend, BackendError, Completion, FinishReason, GenerationRequest
from agentgym.policy.models import cache_keyword, output_cache


@dataclass
class _EpisodeCache:
    ids: list[int]  #: the ids whose keys/values are cached, in order
    kv: list[tuple[Any, Any]]  #: per layer (keys, values), each [1, heads, len(ids), head_dim]


@dataclass
class _Job:
    request: GenerationRequest
    future: asyncio.Future
    aborted: bool = False


@dataclass
class HFStats:
    """Token counters since the backend was made (or `reset_stats`)."""

    requests: int = 0
    batches: int = 0
    prompt_tokens: int = 0  #: context tokens of all requests
    prefilled_tokens: int = 0  #: context tokens encoded by prefill (the rest came from caches)
    decoded_tokens: int = 0  #: sampled tokens fed back during decoding
    generated_tokens: int = 0  #: tokens sampled

    @property
    def encoded_tokens(self) -> int:
        """Every token position the model ran a forward pass for."""
        return self.prefilled_tokens + self.decoded_tokens


@dataclass
class _Row:
    """One request inside a running batch."""

    job: _Job
    ids: list[int]
    cached: int  #: leading ids served from the cache
    budget: int  #: max new tokens for this row
    sampler: Any
    generated: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: FinishReason | None = None


class HFBackend(Backend):
    """A transformers model as a rollout backend (see the module docstring)."""

    name = "hf"

    def __init__(self, model: Any, tokenizer: Any, *, max_batch_size: int = 64, batch_wait_s: float = 0.002,
                 reuse_cache: bool = True, max_cached_episodes: int = 4096, seed: int = 0):
        super().__init__()
        self.torch = require("torch", extra="train", what="the hf backend")
        if max_batch_size < 1:
            raise ConfigError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.reuse_cache = reuse_cache
        self.max_cached_episodes = max_cached_episodes
        self.stats = HFStats()
        self.stop_ids = _stop_ids(model, tokenizer)
        self._cache_keyword = cache_keyword(model)  #: `cache` or `past_key_values`, by transformers version
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(self.stop_ids)
        self._caches: OrderedDict[str, _EpisodeCache] = OrderedDict()
        self._shared_gen = self.torch.Generator(device=self.device)
        self._shared_gen.manual_seed(seed)
        self._lock = threading.Lock()  # one batch or weight update at a time
        self._worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentgym-hf")
        self._pending: list[_Job] = []
        self._running: list[_Job] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wakeup: asyncio.Event | None = None
        self._batcher: asyncio.Task | None = None

    @classmethod
    def from_pretrained(cls, name_or_path: str | os.PathLike[str], *, device: str | None = None,
                        dtype: Any = None, **kwargs: Any) -> HFBackend:
        """Load a model directory (or hub name) through `agentgym.policy.models.load_model`."""
        from agentgym.policy.models import load_model

        model, tokenizer = load_model(name_or_path, dtype=dtype, device=device)
        return cls(model, tokenizer, **kwargs)

    @property
    def max_context(self) -> int | None:
        return getattr(self.model.config, "max_position_embeddings", None)

    # ---- public API ----------------------------------------------------------
    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        self._ensure_batcher()
        loop = asyncio.get_running_loop()
        jobs = [_Job(r, loop.create_future()) for r in requests]
        self._pending.extend(jobs)
        assert self._wakeup is not None
        self._wakeup.set()
        return list(await asyncio.gather(*(j.future for j in jobs)))

    def release(self, episode_id: str) -> None:
        self._caches.pop(episode_id, None)

    def abort(self, episode_ids: Iterable[str] | None = None) -> None:
        wanted = None if episode_ids is None else set(episode_ids)
        for job in [*self._pending, *self._running]:
            if wanted is None or job.request.episode_id in wanted:
                job.aborted = True

    def update_weights(self, weights: Any, *, version: int | None = None) -> int:
        """Load a (full or partial) state dict or a checkpoint path; drops every KV cache."""
        from agentgym.policy.weight_buckets import copy_into, one_thread

        state = _load_state(weights) if isinstance(weights, str | os.PathLike) else dict(weights)
        with self._lock:
            own = self.model.state_dict()
            unknown = sorted(k for k in state if k not in own)
            if unknown:
                raise ConfigError(f"update_weights got {len(unknown)} keys the model does not have, e.g. "
                                  f"{unknown[:3]}; pass the policy model's state_dict (merge LoRA adapters first)")
            for key, value in state.items():
                if tuple(value.shape) != tuple(own[key].shape):
                    raise ConfigError(f"update_weights: '{key}' has shape {tuple(value.shape)}, "
                                      f"the model expects {tuple(own[key].shape)}")
            with one_thread():  # in place, as load_state_dict does; one memcpy per tensor on a CPU
                for key, value in state.items():
                    copy_into(own[key], value)
            self._caches.clear()
            return self._bump_version(version)

    def edit_weights(self, edit: Any, *, version: int | None = None) -> int:
        """Run `edit(model)`, which writes new values into the model's weights in place, between generation
        batches; drops every KV cache and bumps the version like `update_weights`. For a receiver that
        computes weights straight into the model (a LoRA merge) instead of building a state dict first."""
        with self._lock, self.torch.no_grad():
            edit(self.model)
            self._caches.clear()
            return self._bump_version(version)

    def reset_stats(self) -> None:
        self.stats = HFStats()

    @property
    def cached_episodes(self) -> int:
        return len(self._caches)

    async def aclose(self) -> None:
        if self._batcher is not None:
            self._batcher.cancel()
            self._batcher = None
        self._caches.clear()
        self._worker.shutdown(wait=False)

    # ---- batcher ---------------------------------------------------------------
    def _ensure_batcher(self) -> None:
        loop = asyncio.get_running_loop()
        if self._batcher is None or self._batcher.done() or self._loop is not loop:
            self._loop, self._wakeup = loop, asyncio.Event()
            self._batcher = loop.create_task(self._run_batcher(), name="agentgym-hf-batcher")

    async def _run_batcher(self) -> None:
        assert self._wakeup is not None
        loop = asyncio.get_running_loop()
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            if self.batch_wait_s > 0 and len(self._pending) < self.max_batch_size:
                await asyncio.sleep(self.batch_wait_s)
            while self._pending:
                jobs, self._pending = self._pending[:self.max_batch_size], self._pending[self.max_batch_size:]
                self._running = jobs
                try:
                    results = await loop.run_in_executor(self._worker, self._run_batch, jobs)
                except Exception as exc:  # the model crashed: fail this batch, keep serving
                    results = [BackendError(f"hf backend batch failed: {exc!r}") for _ in jobs]
                finally:
                    self._running = []
                for job, result in zip(jobs, results, strict=True):
                    if job.future.done():
                        continue
                    if isinstance(result, BaseException):
                        job.future.set_exception(result)
                    else:
                        job.future.set_result(result)

    # ---- the batch (worker thread) ---------------------------------------------
    def _run_batch(self, jobs: list[_Job]) -> list[Completion | BaseException]:
        from agentgym.policy.sampling import RowSampler, make_generator

        with self._lock, self.torch.inference_mode():
            self.stats.batches += 1
            rows: list[_Row] = []
            results: list[Completion | BaseException | None] = [None] * len(jobs)
            for i, job in enumerate(jobs):
                try:
                    ids = self._context_ids(job.request)
                    budget = self._budget(job.request, len(ids))
                except BackendError as exc:
                    results[i] = exc
                    continue
                if job.aborted:
                    results[i] = self._completion(_Row(job, ids, 0, 0, None, finish=FinishReason.ABORT))
                    continue
                sampler = RowSampler(job.request.sampling, make_generator(job.request.sampling.seed, self.device))
                rows.append(_Row(job, ids, 0, budget, sampler))
            if rows:
                self._generate_rows(rows)
            done = iter(rows)
            return [r if r is not None else self._completion(next(done)) for r in results]

    def _context_ids(self, request: GenerationRequest) -> list[int]:
        if request.prompt_ids is not None:
            ids = list(request.prompt_ids)
        else:
            ids = list(self.tokenizer.apply_chat_template(
                request.messages, tools=request.tools, tokenize=True, add_generation_prompt=True,
                return_dict=False))
        if not ids:
            raise BackendError(f"episode {request.episode_id}: empty prompt")
        return ids

    def _budget(self, request: GenerationRequest, length: int) -> int:
        limit = self.max_context
        room = request.sampling.max_new_tokens if limit is None else min(request.sampling.max_new_tokens, limit - length)
        if room < 1:
            raise BackendError(f"episode {request.episode_id}: context of {length} tokens leaves no room in the "
                               f"model's {limit}-token context; end the episode (the collector truncates it)")
        return room

    def _generate_rows(self, rows: list[_Row]) -> None:
        """Prefill every row's uncached ids in one forward, then decode all rows together."""
        from agentgym.policy.sampling import sample_rows

        torch = self.torch
        caches = [self._take_cache(row) for row in rows]
        width = max(len(c.ids) for c in caches)
        suffixes = [row.ids[row.cached:] for row in rows]
        span = max(len(s) for s in suffixes)
        batch = len(rows)
        mask = torch.zeros(batch, width + span, dtype=torch.long, device=self.device)
        input_ids = torch.full((batch, span), self.pad_id, dtype=torch.long, device=self.device)
        positions = torch.zeros(batch, span, dtype=torch.long, device=self.device)
        for i, (row, suffix) in enumerate(zip(rows, suffixes, strict=True)):
            mask[i, width - row.cached:width] = 1
            mask[i, width + span - len(suffix):] = 1
            input_ids[i, span - len(suffix):] = torch.tensor(suffix, device=self.device)
            positions[i, span - len(suffix):] = torch.arange(row.cached, row.cached + len(suffix), device=self.device)
            self.stats.prefilled_tokens += len(suffix)
            self.stats.prompt_tokens += len(row.ids)
            self.stats.requests += 1
        past = self._stack_caches(caches, width)
        out = self.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                         use_cache=True, logits_to_keep=1, **{self._cache_keyword: past})
        past, logits = output_cache(out), out.logits[:, -1, :]
        next_pos = torch.tensor([len(r.ids) for r in rows], device=self.device)
        while True:
            tokens, logps = sample_rows(logits, [r.sampler for r in rows], self._shared_gen)
            active = self._record_step(rows, tokens.tolist(), logps.tolist())
            if not any(active):
                break
            step_mask = torch.tensor(active, dtype=torch.long, device=self.device).unsqueeze(1)
            mask = torch.cat([mask, step_mask], dim=1)
            self.stats.decoded_tokens += sum(active)
            out = self.model(input_ids=tokens.unsqueeze(1), attention_mask=mask, position_ids=next_pos.unsqueeze(1),
                             use_cache=True, **{self._cache_keyword: past})
            past, logits = output_cache(out), out.logits[:, -1, :]
            next_pos = next_pos + step_mask.squeeze(1)
        self._keep_caches(rows, past, mask)

    def _record_step(self, rows: list[_Row], tokens: list[int], logps: list[float]) -> list[bool]:
        """Append each unfinished row's sampled token; returns which rows go on decoding."""
        active = []
        for row, token, logp in zip(rows, tokens, logps, strict=True):
            if row.finish is None:
                row.generated.append(token)
                row.logprobs.append(logp)
                self.stats.generated_tokens += 1
                row.finish = self._finish_reason(row)
            active.append(row.finish is None)
        return active

    def _finish_reason(self, row: _Row) -> FinishReason | None:
        if row.generated[-1] in self.stop_ids:
            return FinishReason.STOP
        stops = row.job.request.sampling.stop
        if stops:
            tail = self.tokenizer.decode(row.generated[-16:], skip_special_tokens=False)
            if any(s in tail for s in stops):
                return FinishReason.STOP
        if len(row.generated) >= row.budget:
            return FinishReason.LENGTH
        if row.job.aborted:
            return FinishReason.ABORT
        return None

    # ---- caches --------------------------------------------------------------
    def _take_cache(self, row: _Row) -> _EpisodeCache:
        """The row's reusable cache, cut to the longest prefix shared with its ids (at least one id left)."""
        cache = self._caches.pop(row.job.request.episode_id, None) if self.reuse_cache else None
        if cache is None:
            return _EpisodeCache([], [])
        shared = 0
        limit = min(len(cache.ids), len(row.ids) - 1)
        while shared < limit and cache.ids[shared] == row.ids[shared]:
            shared += 1
        row.cached = shared
        return _EpisodeCache(cache.ids[:shared], [(k[:, :, :shared], v[:, :, :shared]) for k, v in cache.kv])

    def _stack_caches(self, caches: list[_EpisodeCache], width: int) -> Any:
        """A DynamicCache holding every row's cache right-aligned in a block of `width` positions."""
        from transformers import DynamicCache

        if width == 0:
            return DynamicCache(config=self.model.config)
        torch = self.torch
        template = next(c.kv for c in caches if c.ids)
        layers = []
        for layer, (k0, v0) in enumerate(template):
            keys = torch.zeros((len(caches), k0.shape[1], width, k0.shape[3]), dtype=k0.dtype, device=k0.device)
            values = torch.zeros((len(caches), v0.shape[1], width, v0.shape[3]), dtype=v0.dtype, device=v0.device)
            for i, cache in enumerate(caches):
                if cache.ids:
                    keys[i, :, width - len(cache.ids):] = cache.kv[layer][0][0]
                    values[i, :, width - len(cache.ids):] = cache.kv[layer][1][0]
            layers.append((keys, values))
        return DynamicCache(ddp_cache_data=layers, config=self.model.config)

    def _keep_caches(self, rows: list[_Row], past: Any, mask: Any) -> None:
        """Store each row's compacted cache: its context plus all sampled tokens but the last."""
        if not self.reuse_cache:
            return
        layers = [(layer.keys, layer.values) for layer in past.layers]
        for i, row in enumerate(rows):
            keep = mask[i].nonzero().squeeze(1)
            ids = row.ids + row.generated[:-1]
            if keep.numel() != len(ids):
                raise BackendError(f"internal: cache of episode {row.job.request.episode_id} holds {keep.numel()} "
                                   f"positions for {len(ids)} ids")
            kv = [(k[i:i + 1].index_select(2, keep), v[i:i + 1].index_select(2, keep)) for k, v in layers]
            self._caches[row.job.request.episode_id] = _EpisodeCache(ids, kv)
        while len(self._caches) > self.max_cached_episodes:
            self._caches.popitem(last=False)

    def _completion(self, row: _Row) -> Completion:
        ids = row.generated
        body = ids[:-1] if ids and ids[-1] in self.stop_ids else ids
        text = self.tokenizer.decode(body, skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return Completion(episode_id=row.job.request.episode_id, token_ids=list(ids), logprobs=list(row.logprobs),
                          text=text, finish_reason=row.finish or FinishReason.LENGTH, version=self.version,
                          prompt_tokens=len(row.ids), prefilled_tokens=len(row.ids) - row.cached,
                          source=self.name)


def _stop_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    """End-of-turn ids: the generation config's eos ids and the tokenizer's eos."""
    ids: set[int] = set()
    eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids.update(eos if isinstance(eos, list | tuple) else [eos] if eos is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    if not ids:
        raise ConfigError("the model has no eos token id; set generation_config.eos_token_id")
    return frozenset(ids)


def _load_state(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A state dict from a safetensors/torch file or a directory of them."""
    path = Path(path)
    files = sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin")) if path.is_dir() else [path]
    if not files:
        raise ConfigError(f"no *.safetensors or *.bin weights in {path}; pass a checkpoint directory or file")
    state: dict[str, Any] = {}
    for file in files:
        if file.suffix == ".safetensors":
            state.update(require("safetensors.torch", extra="train", what="loading weights").load_file(str(file)))
        else:
            import torch

            state.update(torch.load(file, map_location="cpu", weights_only=True))
    return state
