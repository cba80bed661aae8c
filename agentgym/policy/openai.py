"""The `openai` backend: any OpenAI-compatible server (`vllm serve`, SGLang, `agentgym serve`).

    backend = OpenAIBackend("http://127.0.0.1:8000/v1", model="tiny", tokenizer=tokenizer)

- **Exact ids.** With a tokenizer and a request that carries ``prompt_ids``,
  the backend calls ``/v1/completions`` with the token ids as the prompt, so
  the server sees exactly the context the collector records, and asks for
  the sampled ids back (``return_tokens_as_token_ids``, supported by vLLM
  and `agentgym serve`). Without ids, or against a server that has no
  completions endpoint, it falls back to ``/v1/chat/completions``.
- **Log-probs** are always requested (``logprobs``); a server that returns
  none fails the request with a message saying so.
- **Connection pooling** through one `httpx.AsyncClient`; **retries** with
  exponential backoff and jitter on transient failures (connection refused
  or dropped, timeouts, 429 and 5xx, honouring ``Retry-After``); any other
  error fails the request at once with the server's message.
- `agentgym serve` extras: an ``X-Agentgym-Episode`` header lets the server
  keep the episode's KV cache between turns, `release` frees it, and the
  server's policy version comes back in ``system_fingerprint``.

Aborting cancels the HTTP request: the completion comes back with finish
reason ``abort`` and no tokens (an HTTP completion has nothing partial to keep).
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Iterable, Sequence
from typing import Any

from agentgym.errors import ConfigError, require
from agentgym.policy.base import Backend, BackendError, Completion, FinishReason, GenerationRequest

TRANSIENT_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_VERSION = re.compile(r"agentgym-v(\d+)")
_TOKEN_ID = re.compile(r"token_id:(\d+)")


class OpenAIBackend(Backend):
    """A client of an OpenAI-compatible server (see the module docstring)."""

    name = "openai"

    def __init__(self, base_url: str, model: str | None = None, *, tokenizer: Any = None, api_key: str | None = None,
                 mode: str = "auto", max_retries: int = 5, backoff_s: float = 0.25, max_backoff_s: float = 8.0,
                 timeout_s: float = 300.0, max_connections: int = 256, max_context: int | None = None):
        super().__init__()
        if mode not in ("auto", "completions", "chat"):
            raise ConfigError(f"mode must be 'auto', 'completions' or 'chat', got {mode!r}")
        if max_retries < 0:
            raise ConfigError(f"max_retries must be >= 0, got {max_retries}")
        self.httpx = require("httpx", extra="serve", what="the openai backend")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.tokenizer = tokenizer
        self.mode = mode
        self.max_retries, self.backoff_s, self.max_backoff_s = max_retries, backoff_s, max_backoff_s
        self._max_context = max_context
        self.stop_ids = frozenset([tokenizer.eos_token_id]) if tokenizer is not None else frozenset()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = self.httpx.AsyncClient(
            base_url=self.base_url, headers=headers, timeout=self.httpx.Timeout(timeout_s, connect=10.0),
            limits=self.httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections))
        self._inflight: dict[str, set[asyncio.Task]] = {}
        self.retries = 0  #: transient failures retried so far
        self._agentgym_server: bool | None = None

    @property
    def max_context(self) -> int | None:
        return self._max_context

    # ---- generation ------------------------------------------------------------
    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        if self.model is None:
            await self._discover_model()
        tasks = [asyncio.ensure_future(self._one(r)) for r in requests]
        for request, task in zip(requests, tasks, strict=True):
            self._inflight.setdefault(request.episode_id, set()).add(task)
        try:
            results = await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            for request, task in zip(requests, tasks, strict=True):
                self._inflight.get(request.episode_id, set()).discard(task)
        out = []
        for request, result in zip(requests, results, strict=True):
            if isinstance(result, asyncio.CancelledError):
                out.append(Completion(episode_id=request.episode_id, finish_reason=FinishReason.ABORT,
                                      version=self.version, source=self.name))
            elif isinstance(result, BaseException):
                raise result
            else:
                out.append(result)
        return out

    async def _one(self, request: GenerationRequest) -> Completion:
        use_ids = self.mode != "chat" and request.prompt_ids is not None and self.tokenizer is not None
        if use_ids:
            try:
                return await self._completions(request)
            except _NoEndpoint:
                if self.mode == "completions":
                    raise BackendError(f"{self.base_url} has no /completions endpoint; use mode='chat'") from None
                self.mode = "chat"
        return await self._chat(request)

    def _sampling_body(self, request: GenerationRequest) -> dict[str, Any]:
        s = request.sampling
        body: dict[str, Any] = {"model": self.model, "max_tokens": s.max_new_tokens, "temperature": s.temperature,
                                "top_p": s.top_p, "n": 1, "return_tokens_as_token_ids": True}
        if s.top_k:
            body["top_k"] = s.top_k
        if s.seed is not None:
            body["seed"] = s.seed
        if s.stop:
            body["stop"] = list(s.stop)
        return body

    async def _completions(self, request: GenerationRequest) -> Completion:
        body = {**self._sampling_body(request), "prompt": list(request.prompt_ids or []), "logprobs": 1}
        data = await self._post("/completions", body, request.episode_id, allow_missing=True)
        choice = _first_choice(data)
        lp = choice.get("logprobs") or {}
        ids = self._ids(choice, lp.get("tokens") or [], request)
        return self._completion(request, data, choice, ids, lp.get("token_logprobs") or [], len(body["prompt"]))

    async def _chat(self, request: GenerationRequest) -> Completion:
        body = {**self._sampling_body(request), "messages": request.messages, "logprobs": True}
        if request.tools:
            body["tools"] = request.tools
        data = await self._post("/chat/completions", body, request.episode_id)
        choice = _first_choice(data)
        content = (choice.get("logprobs") or {}).get("content") or []
        ids = self._ids(choice, [c.get("token", "") for c in content], request)
        text = (choice.get("message") or {}).get("content") or ""
        usage = data.get("usage") or {}
        return self._completion(request, data, {**choice, "text": text}, ids, [c.get("logprob") for c in content],
                                int(usage.get("prompt_tokens", 0)))

    def _ids(self, choice: dict[str, Any], tokens: list[str], request: GenerationRequest) -> list[int]:
        if isinstance(choice.get("token_ids"), list):
            return [int(t) for t in choice["token_ids"]]
        ids = []
        for token in tokens:
            match = _TOKEN_ID.fullmatch(str(token))
            if match is None:
                raise BackendError(f"{self.base_url} returned tokens as text ({token!r}), not ids, for episode "
                                   f"{request.episode_id}; use a server that supports return_tokens_as_token_ids "
                                   "(vLLM, agentgym serve) so the sampled ids are exact")
            ids.append(int(match.group(1)))
        return ids

    def _completion(self, request: GenerationRequest, data: dict[str, Any], choice: dict[str, Any], ids: list[int],
                    logprobs: list[Any], prompt_tokens: int) -> Completion:
        if len(logprobs) != len(ids) or any(lp is None for lp in logprobs):
            raise BackendError(f"{self.base_url} returned {len(ids)} tokens with {len(logprobs)} log-probs for episode "
                               f"{request.episode_id}; the server must support logprobs")
        reason = {"length": FinishReason.LENGTH, "abort": FinishReason.ABORT}.get(choice.get("finish_reason"),
                                                                                 FinishReason.STOP)
        match = _VERSION.search(str(data.get("system_fingerprint") or ""))
        return Completion(episode_id=request.episode_id, token_ids=ids, logprobs=[float(x) for x in logprobs],
                          text=choice.get("text") or "", finish_reason=reason,
                          version=int(match.group(1)) if match else self.version, prompt_tokens=prompt_tokens,
                          source=self.name)

    # ---- HTTP with retries -------------------------------------------------------
    async def _post(self, path: str, body: dict[str, Any], episode_id: str, allow_missing: bool = False) -> dict:
        headers = {"X-Agentgym-Episode": episode_id}
        for attempt in range(self.max_retries + 1):
            try:
                response = await self._client.post(path, json=body, headers=headers)
            except (self.httpx.TransportError, self.httpx.TimeoutException) as exc:
                reason, retry_after = f"{type(exc).__name__}: {exc}", None
            else:
                if response.status_code < 300:
                    return response.json()
                if response.status_code in (404, 405) and allow_missing:
                    raise _NoEndpoint()
                reason = f"HTTP {response.status_code}: {response.text[:300]}"
                if response.status_code not in TRANSIENT_STATUS:
                    raise BackendError(f"{self.base_url}{path} refused the request ({reason}); not retried")
                retry_after = _retry_after(response)
            if attempt == self.max_retries:
                raise BackendError(f"{self.base_url}{path} failed {attempt + 1} times; last: {reason}", transient=True)
            self.retries += 1
            delay = min(self.max_backoff_s, self.backoff_s * 2**attempt) * (0.5 + random.random() / 2)
            await asyncio.sleep(retry_after if retry_after is not None else delay)
        raise AssertionError("unreachable")

    async def _discover_model(self) -> None:
        data = await self._get("/models")
        models = data.get("data") or []
        if not models:
            raise BackendError(f"{self.base_url}/models lists no model; pass model= explicitly")
        self.model = models[0]["id"]
        self._agentgym_server = models[0].get("owned_by") == "agentgym"

    async def _get(self, path: str) -> dict[str, Any]:
        try:
            response = await self._client.get(path)
        except self.httpx.TransportError as exc:
            raise BackendError(f"cannot reach {self.base_url}{path}: {exc}", transient=True) from exc
        if response.status_code >= 300:
            raise BackendError(f"{self.base_url}{path}: HTTP {response.status_code}: {response.text[:200]}")
        return response.json()

    # ---- lifecycle -------------------------------------------------------------------
    def abort(self, episode_ids: Iterable[str] | None = None) -> None:
        keys = list(self._inflight) if episode_ids is None else list(episode_ids)
        for key in keys:
            for task in self._inflight.get(key, ()):
                task.cancel()

    def release(self, episode_id: str) -> None:
        if self._agentgym_server:
            task = asyncio.ensure_future(self._release(episode_id))
            task.add_done_callback(lambda t: t.exception() if not t.cancelled() else None)

    async def _release(self, episode_id: str) -> None:
        try:
            await self._client.post("/agentgym/release", json={"episode_id": episode_id})
        except self.httpx.TransportError:
            pass  # the server frees idle caches on its own (LRU)

    def set_version(self, version: int) -> int:
        """Record that the server now runs weights of `version` (after reloading it yourself)."""
        return self._bump_version(version)

    async def aclose(self) -> None:
        await self._client.aclose()


class _NoEndpoint(Exception):
    pass


def _first_choice(data: dict[str, Any]) -> dict[str, Any]:
    choices = data.get("choices") or []
    if not choices:
        raise BackendError(f"server response has no choices: {str(data)[:200]}")
    return choices[0]


def _retry_after(response: Any) -> float | None:
    try:
        return min(float(response.headers.get("retry-after", "")), 30.0)
    except ValueError:
        return None
