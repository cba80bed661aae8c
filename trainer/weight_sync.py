"""Push the trainer's new weights into the rollout backend after each update: the `WeightSync` protocol.

Every sync path implements `WeightSync` (a `name` and `push(model, version) -> version`) and the
trainer uses nothing else:

- ``in_process`` (`InProcessSync`): the hf backend in the trainer's process gets a state dict;
- ``process_group`` (`trainer.sync_process_group.ProcessGroupSync`): bucketed broadcast to
  `agentgym serve` engines through a gloo (CPU) or NCCL (GPU) process group, no disk;
- ``shared_memory`` (`trainer.sync_shared_memory.SharedMemorySync`): buckets through one
  shared-memory segment to `agentgym serve` engines on the same host, no disk;
- ``ray`` (`trainer.ray_runtime.trainer_actor.RayWeightSync`): one `ray.put`, every rollout worker loads it;
- ``save_reload`` (`SaveAndReloadSync`): the fallback for servers we do not control (below).

Details of the first and the last:

- ``hf`` (same process): `InProcessSync` hands the backend a state dict of full
  weights (LoRA deltas merged in); the backend loads it between two generation
  batches under its own lock, drops its KV caches and bumps its version.
- ``openai`` / ``vllm`` (another process or engine): `SaveAndReloadSync`
  writes the merged model with ``save_pretrained`` into
  ``<run_dir>/weights/v<version>/`` (older ones are pruned), then has it loaded:
  - ``vllm`` (in-process engine): ``await backend.aupdate_weights(path)``
    (vLLM's ``reload_weights``), run on the event loop that owns the engine;
  - ``openai`` against ``agentgym serve``: ``POST <server>/agentgym/update_weights``
    with ``{"path", "version"}``; the server loads the directory and bumps its
    version, and the client records it (``set_version``);
  - ``openai`` against any other server (``vllm serve``, SGLang): pass
    ``reload=`` a callable ``(path, version) -> None`` that makes the server
    load the directory (restart it, or call its own reload API); the client
    then records the version. Without one, the sync fails with a clear error.

Either way the backend's `version` is the trainer's policy version, and every
token sampled afterwards carries it.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agentgym.trainer.model import is_lora, lora_adapter_state, merged_state_dict


@runtime_checkable
class WeightSync(Protocol):
    """Deliver `model`'s weights (merged, full) as policy `version`; returns the backend's new version.

    The trainer calls `bind` once, on the event loop its rollout engines live on, before the first
    `push` (which then runs in a worker thread); a sync whose engine is driven on that loop (the
    in-process vLLM engine) keeps it, the others inherit this no-op.
    """

    name: str  #: in_process | process_group | shared_memory | ray | save_reload

    def push(self, model: Any, version: int) -> int: ...

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Remember the event loop that owns the rollout engines (default: nothing to remember)."""


class InProcessSync(WeightSync):
    """For the hf backend: a state dict, in memory."""

    name = "in_process"

    def __init__(self, backend: Any):
        self.backend = backend

    def push(self, model: Any, version: int) -> int:
        return self.backend.update_weights(merged_state_dict(model), version=version)


class SaveAndReloadSync(WeightSync):
    """For openai/vllm backends: save a loadable model directory, then have the backend load it."""

    name = "save_reload"

    def __init__(self, backend: Any, directory: str | Path, tokenizer: Any = None, keep: int = 2, *,
                 loop: asyncio.AbstractEventLoop | None = None, reload: Callable[[str, int], None] | None = None):
        self.backend, self.directory, self.tokenizer, self.keep = backend, Path(directory), tokenizer, keep
        self.loop, self.reload = loop, reload
        self._http: Any = None  #: an httpx.Client, made at the first POST to `agentgym serve`

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def push(self, model: Any, version: int) -> int:
        target = self.directory / f"v{version:06d}"
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        base = model.get_base_model() if is_lora(model) else model
        base.save_pretrained(tmp, state_dict=merged_state_dict(model))
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(tmp)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        new_version = self._deliver(str(target), version)
        for old in sorted(self.directory.glob("v*"))[:-self.keep]:
            shutil.rmtree(old, ignore_errors=True)
        return new_version

    def _deliver(self, path: str, version: int) -> int:
        backend = self.backend
        if backend.name == "vllm":  # an in-process async engine
            if self.loop is None:
                raise RuntimeError("SaveAndReloadSync for the vllm backend needs loop= (the engine's event loop)")
            return asyncio.run_coroutine_threadsafe(backend.aupdate_weights(path, version=version), self.loop).result()
        if backend.name == "openai":  # an OpenAI-compatible server
            if self.reload is not None:
                self.reload(path, version)
            else:
                self._post_update(backend.base_url, path, version)
            return backend.set_version(version)
        return backend.update_weights(path, version=version)

    def _post_update(self, base_url: str, path: str, version: int) -> None:
        """Ask an `agentgym serve` server to load `path` as `version` (through one kept-alive client)."""
        import httpx

        if self._http is None:
            self._http = httpx.Client(timeout=600)
        post_json(server_root(base_url), "/agentgym/update_weights", {"path": path, "version": version},
                  client=self._http)


class EngineSync(WeightSync):
    """Shared by the syncs into `agentgym serve` engines at `base_urls` (process group, shared memory).

    `push` sends the full merged weights, or only the adapter of a LoRA model (`adapter_only`; the
    engine merges it); a subclass's `push_state` delivers a state dict and returns `_loaded(...)`
    of the versions the engines report.
    """

    name: str

    def __init__(self, base_urls: list[str], *, timeout_s: float, backend: Any, adapter_only: bool):
        if not base_urls:
            raise ValueError(f"{type(self).__name__} needs at least one engine URL")
        self.roots = [server_root(u) for u in base_urls]
        self.adapter_only = adapter_only  #: a LoRA run sends only its adapter (the engine merges it)
        self.timeout_s, self.backend = timeout_s, backend
        import httpx

        self._http = httpx.Client(timeout=timeout_s)  #: kept alive between pushes

    def post(self, root: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """`post_json` through this sync's kept-alive client (thread-safe: the process group posts from a pool)."""
        return post_json(root, path, body, timeout=self.timeout_s, client=self._http)

    def push(self, model: Any, version: int) -> int:
        """Full merged weights, or only the adapter of a LoRA model (`adapter_only`)."""
        if self.adapter_only and is_lora(model):
            adapter, scaling = lora_adapter_state(model)
            return self.push_state(adapter, version, lora_scaling=scaling)
        return self.push_state(merged_state_dict(model), version)

    def push_state(self, state: dict[str, Any], version: int, *, lora_scaling: dict[str, float] | None = None) -> int:
        raise NotImplementedError

    def _loaded(self, versions: list[int], version: int) -> int:
        """The new version once every engine reports it (recorded on the client backend, if any)."""
        if any(v != version for v in versions):
            raise RuntimeError(f"engines report versions {versions} after loading version {version}")
        return self.backend.set_version(version) if self.backend is not None else version


def server_root(base_url: str) -> str:
    """`http://host:port` of an OpenAI-compatible base URL (`.../v1`)."""
    return base_url.rstrip("/").removesuffix("/v1")


def post_json(root: str, path: str, body: dict[str, Any], *, timeout: float = 600,
              client: Any = None) -> dict[str, Any]:
    """POST `body` to an `agentgym serve` endpoint; a clear error when it is not one.

    Pass `client` (an `httpx.Client`) to reuse its connections: a one-off `httpx.post` builds a new client,
    TLS context included, which costs tens of milliseconds on every push.
    """
    import httpx

    try:
        poster = client.post if client is not None else httpx.post
        response = poster(f"{root}{path}", json=body, timeout=timeout)
    except httpx.HTTPError as exc:
        raise RuntimeError(f"could not reach {root}{path} ({exc!r}); is it `agentgym serve`?") from exc
    if response.status_code == 404:
        raise RuntimeError(f"{root} has no {path} endpoint (not `agentgym serve`): use weight_sync: save_reload, "
                           "or SaveAndReloadSync(reload=...) with a callable that makes your server load a directory")
    if response.status_code >= 400:
        raise RuntimeError(f"{root}{path} answered {response.status_code}: {response.text[:500]}")
    return response.json()
