"""An OpenAI-compatible server in front of the `hf` backend (`agentgym serve MODEL_DIR --port P`).

Endpoints:

- ``GET  /v1/models``
- ``POST /v1/completions``: ``prompt`` as text or as token ids; ``logprobs``;
  ``return_tokens_as_token_ids`` (tokens come back as ``"token_id:N"``, as vLLM does)
- ``POST /v1/chat/completions``: ``messages`` (and ``tools``) through the model's chat template; ``logprobs``
- ``POST /agentgym/release``, ``POST /agentgym/update_weights`` (a directory), ``GET /health``
- weight sync without the disk (`agentgym.policy.weight_receiver`): ``POST /agentgym/weights/join``
  (become a rank of the trainer's weight group), ``POST /agentgym/weights/receive`` (take one bucketed
  broadcast), ``POST /agentgym/weights/shm`` (load from a shared-memory segment on this host),
  ``GET /agentgym/weights/digest`` (sha256 of the loaded weights, to check a sync)

Sampling fields: ``max_tokens``, ``temperature``, ``top_p``, ``top_k`` (an
extension, as in vLLM), ``seed``, ``stop``; ``n`` must be 1. Requests that
carry an ``X-Agentgym-Episode`` header share that episode's KV cache across
turns; the policy version is reported in ``system_fingerprint`` as
``agentgym-vN``. Log-probs follow `agentgym.policy.base.LOGPROB_CONVENTION`.
Weights may arrive with a lower version than the served one: a trainer that was killed and resumed
from its checkpoint sends that checkpoint's weights and version, and the server takes both.

Needs the `serve` extra (fastapi, uvicorn) and the `train` extra (torch, transformers).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agentgym.errors import ConfigError, require
from agentgym.policy.base import BackendError, Completion, GenerationRequest, SamplingParams
from agentgym.policy.hf import HFBackend
from agentgym.trajectory import new_id


class _Sampling(BaseModel):
    """Sampling fields shared by both endpoints (OpenAI names)."""

    model: str | None = None
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    stop: str | list[str] | None = None
    n: int = 1
    return_tokens_as_token_ids: bool = False

class CompletionBody(_Sampling):
    prompt: str | list[int]
    logprobs: int | None = None

class ChatBody(_Sampling):
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    logprobs: bool = False

class ReleaseBody(BaseModel):
    episode_id: str

class WeightsBody(BaseModel):
    path: str
    version: int | None = None

class JoinBody(BaseModel):
    host: str
    port: int
    rank: int
    world_size: int
    backend: str = "gloo"
    timeout_s: float = 300.0

class ReceiveBody(BaseModel):
    manifest: dict[str, Any]
    version: int | None = None
    lora_scaling: dict[str, float] | None = None  #: set when only a LoRA adapter is sent

class SharedMemoryBody(ReceiveBody):
    name: str


def create_app(backend: HFBackend, model_name: str, root: str | None = None) -> Any:
    """The FastAPI app serving `backend` under the model id `model_name` (`root`: its local directory)."""
    fastapi = require("fastapi", extra="serve", what="agentgym serve")
    from fastapi.responses import JSONResponse

    app = fastapi.FastAPI(title="agentgym serve")
    backend.rewind_versions = True  # a resumed trainer sends its checkpoint's version, maybe below the served one

    @app.exception_handler(ConfigError)
    async def _config_error(_request: Any, exc: ConfigError) -> Any:
        return JSONResponse(status_code=400, content=_error(str(exc)))

    @app.exception_handler(BackendError)
    async def _backend_error(_request: Any, exc: BackendError) -> Any:
        return JSONResponse(status_code=503 if exc.transient else 400, content=_error(str(exc)))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "version": backend.version}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "created": 0, "owned_by": "agentgym",
                                            "max_model_len": backend.max_context, "root": root or model_name}]}

    @app.post("/v1/completions")
    async def completions(body: CompletionBody, x_agentgym_episode: str | None = fastapi.Header(None)) -> Any:
        ids = body.prompt if isinstance(body.prompt, list) else list(backend.tokenizer(body.prompt).input_ids)
        done = await _generate(backend, GenerationRequest(x_agentgym_episode or "", prompt_ids=ids,
                                                          sampling=_sampling(body)), x_agentgym_episode)
        logprobs = None
        if body.logprobs is not None:
            logprobs = {"tokens": _tokens(backend, done.token_ids, body.return_tokens_as_token_ids),
                        "token_logprobs": done.logprobs, "top_logprobs": None, "text_offset": None}
        choice = {"index": 0, "text": done.text, "logprobs": logprobs, "finish_reason": str(done.finish_reason)}
        return _response("text_completion", model_name, done, choice)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatBody, x_agentgym_episode: str | None = fastapi.Header(None)) -> Any:
        request = GenerationRequest(x_agentgym_episode or "", messages=body.messages, tools=body.tools,
                                    sampling=_sampling(body))
        done = await _generate(backend, request, x_agentgym_episode)
        logprobs = None
        if body.logprobs:
            tokens = _tokens(backend, done.token_ids, body.return_tokens_as_token_ids)
            logprobs = {"content": [{"token": t, "logprob": lp, "bytes": None, "top_logprobs": []}
                                    for t, lp in zip(tokens, done.logprobs, strict=True)]}
        choice = {"index": 0, "message": {"role": "assistant", "content": done.text}, "logprobs": logprobs,
                  "finish_reason": str(done.finish_reason)}
        return _response("chat.completion", model_name, done, choice)

    @app.post("/agentgym/release")
    async def release(body: ReleaseBody) -> dict[str, bool]:
        backend.release(body.episode_id)
        return {"released": True}

    @app.post("/agentgym/update_weights")
    async def update_weights(body: WeightsBody) -> dict[str, int]:
        return {"version": backend.update_weights(body.path, version=body.version)}

    _weight_routes(app, backend)
    return app


def _weight_routes(app: Any, backend: HFBackend) -> None:
    """The endpoints of weight sync without the disk (blocking ones run in the server's thread pool)."""
    from agentgym.policy.weight_receiver import WeightReceiver

    receiver = WeightReceiver(backend, device=str(next(backend.model.parameters()).device))

    @app.post("/agentgym/weights/join")
    def join(body: JoinBody) -> dict[str, bool]:
        receiver.join(body.host, body.port, body.rank, body.world_size, body.backend, body.timeout_s)
        return {"joining": True}

    @app.post("/agentgym/weights/receive")
    def receive(body: ReceiveBody) -> dict[str, int]:
        return {"version": receiver.receive(body.manifest, body.version, lora_scaling=body.lora_scaling)}

    @app.post("/agentgym/weights/shm")
    def shared_memory(body: SharedMemoryBody) -> dict[str, int]:
        return {"version": receiver.from_shared_memory(body.name, body.manifest, body.version,
                                                       lora_scaling=body.lora_scaling)}

    @app.get("/agentgym/weights/digest")
    def weights_digest() -> dict[str, Any]:
        from agentgym.policy.weight_buckets import digest

        return {"digest": digest(backend.model.state_dict()), "version": backend.version}


def _sampling(body: Any) -> SamplingParams:
    if body.n != 1:
        raise ConfigError(f"n must be 1 (one completion per request), got {body.n}; send n requests instead")
    stop = () if body.stop is None else (body.stop,) if isinstance(body.stop, str) else tuple(body.stop)
    return SamplingParams(temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
                          max_new_tokens=body.max_tokens, stop=stop, seed=body.seed)


async def _generate(backend: HFBackend, request: GenerationRequest, episode: str | None) -> Completion:
    """One completion; requests without an episode header use a throwaway cache."""
    if not episode:
        request.episode_id = "anon-" + new_id()
    try:
        [done] = await backend.generate([request])
    finally:
        if not episode:
            backend.release(request.episode_id)
    return done


def _tokens(backend: HFBackend, ids: list[int], as_ids: bool) -> list[str]:
    if as_ids:
        return [f"token_id:{i}" for i in ids]
    return [backend.tokenizer.decode([i], skip_special_tokens=False) for i in ids]


def _response(kind: str, model: str, done: Completion, choice: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"agentgym-{new_id()[:16]}", "object": kind, "created": int(time.time()), "model": model,
            "system_fingerprint": f"agentgym-v{done.version}", "choices": [choice],
            "usage": {"prompt_tokens": done.prompt_tokens, "completion_tokens": len(done.token_ids),
                      "total_tokens": done.prompt_tokens + len(done.token_ids)}}


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "invalid_request_error"}}


def serve(model_dir: str, *, host: str = "127.0.0.1", port: int = 8000, device: str | None = None,
          name: str | None = None, max_batch_size: int = 64) -> None:
    """Load `model_dir` into an `HFBackend` and serve it with uvicorn until interrupted."""
    uvicorn = require("uvicorn", extra="serve", what="agentgym serve")
    backend = HFBackend.from_pretrained(model_dir, device=device, max_batch_size=max_batch_size,
                                        max_cached_episodes=1024)
    root = str(Path(model_dir).resolve()) if Path(model_dir).is_dir() else str(model_dir)
    app = create_app(backend, name or str(model_dir).rstrip("/").rsplit("/", 1)[-1], root)
    uvicorn.run(app, host=host, port=port, log_level="warning")
