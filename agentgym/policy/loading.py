"""Turn a policy spec into a ready `Backend`, checking everything before any episode starts.

    opened = await open_policy("hf:runs/quickstart@latest", PolicyOptions(temperature=0))
    collector = Collector("Maze-v0", opened.backend, store, tokenizer=opened.prompt_tokenizer,
                          sampling=opened.sampling)
    ...
    await opened.aclose()

Checked up front, each with an error that says what to fix: a checkpoint that
does not exist (listing the ones that do), a model directory that does not
load, an endpoint that does not answer, a model the server does not serve, a
scripted function that does not import. `OpenedPolicy.record()` is what every
episode stores about the policy (spec, kind, version, checkpoint, sampling).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from agentgym.errors import ConfigError
from agentgym.policy.base import Backend, BackendError, SamplingParams
from agentgym.policy.checkpoints import ModelLocation, RunProfile, locate_model, policy_version
from agentgym.policy.openai import OpenAIBackend as _OpenAI
from agentgym.policy.scripted import ScriptedBackend
from agentgym.policy.simple import resolve_policy
from agentgym.policy.spec import PolicySpec, parse_policy

DEFAULT_MAX_NEW_TOKENS = 256


@dataclass(frozen=True)
class PolicyOptions:
    """Sampling and loading options; None means "the run's value when the spec names a run, else the default"."""

    temperature: float = 1.0  #: 0 is greedy
    top_p: float = 1.0
    max_new_tokens: int | None = None  #: per-turn generation cap (default: the run's, else 256)
    seed: int = 0  #: seeds the random policy and every model request (per episode and turn)
    chat_tools: bool | None = None  #: render the env's tool schemas into the prompt (default: the run's, else yes)
    tokenizer: str | None = None  #: openai: tokenizer directory for exact prompt ids (default: the server's model root)
    device: str | None = None  #: hf: torch device
    api_key: str | None = None  #: openai: bearer token
    max_retries: int = 3  #: openai: retries of a transient HTTP failure within one request
    timeout_s: float = 300.0  #: openai: limit on one HTTP request


@dataclass
class OpenedPolicy:
    """A loaded policy: the backend and what the collector needs to drive it as it was trained."""

    spec: PolicySpec
    backend: Backend
    sampling: SamplingParams
    prompt_tokenizer: Any = None  #: what the collector renders prompts with (None: text-level policy)
    location: ModelLocation | None = None  #: hf: where the weights came from
    profile: RunProfile | None = None  #: hf run checkpoints: the run's config

    def record(self) -> dict[str, Any]:
        """What each episode stores about its policy."""
        sampling = {**dataclasses.asdict(self.sampling), "stop": list(self.sampling.stop)}  # as JSON stores it
        record: dict[str, Any] = {**self.spec.to_dict(), "version": self.backend.version, "sampling": sampling}
        if self.location is not None:
            record["checkpoint"] = self.location.describe()
        if isinstance(self.backend, _OpenAI) and self.backend.model:
            record["model"] = self.backend.model
        return record

    async def aclose(self) -> None:
        await self.backend.aclose()


async def open_policy(spec: str | PolicySpec, options: PolicyOptions = PolicyOptions()) -> OpenedPolicy:
    """Parse, load and check `spec` (see the module docstring)."""
    parsed = spec if isinstance(spec, PolicySpec) else parse_policy(spec)
    if parsed.kind in ("random", "solver", "scripted"):
        act = resolve_policy(parsed.text, seed=options.seed)
        return OpenedPolicy(parsed, ScriptedBackend(act), _sampling(options, None))
    if parsed.kind == "hf":
        return _open_hf(parsed, options)
    if parsed.kind == "openai":
        return await _open_openai(parsed, options)
    return _open_vllm(parsed, options)


def _sampling(options: PolicyOptions, profile: RunProfile | None) -> SamplingParams:
    max_new = options.max_new_tokens or (profile.max_new_tokens if profile else None) or DEFAULT_MAX_NEW_TOKENS
    return SamplingParams(temperature=options.temperature, top_p=options.top_p, max_new_tokens=max_new,
                          seed=options.seed)


def _prompts(tokenizer: Any, options: PolicyOptions, profile: RunProfile | None) -> Any:
    chat_tools = options.chat_tools if options.chat_tools is not None else (profile.chat_tools if profile else True)
    if chat_tools:
        return tokenizer
    from agentgym.policy.prompts import WithoutTools

    return WithoutTools(tokenizer)


def _open_hf(spec: PolicySpec, options: PolicyOptions) -> OpenedPolicy:
    from agentgym.policy.hf import HFBackend

    location = locate_model(spec.target, spec.ref)
    try:
        model, tokenizer = _load_weights(location, options.device)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"policy {spec.text!r}: cannot load a model from {location.path}: {exc}") from None
    backend = HFBackend(model, tokenizer, seed=options.seed)
    version = policy_version(location)
    if version:
        backend.version = version
    profile = location.profile
    return OpenedPolicy(spec, backend, _sampling(options, profile), _prompts(tokenizer, options, profile),
                        location, profile)


def _load_weights(location: ModelLocation, device: str | None) -> tuple[Any, Any]:
    """(model, tokenizer); a LoRA adapter directory is loaded onto its base model and merged."""
    from transformers.utils import logging as hf_logging

    from agentgym.policy.models import hub_kernel_kwargs, load_model

    hf_logging.disable_progress_bar()  # the commands print their own progress and tables
    if not location.is_adapter:
        return load_model(location.path, device=device)
    from agentgym.errors import require

    peft = require("peft", extra="train", what="loading a LoRA checkpoint")
    transformers = require("transformers", extra="train", what="loading a LoRA checkpoint")
    model = peft.AutoPeftModelForCausalLM.from_pretrained(location.path, **hub_kernel_kwargs(transformers))
    model = model.merge_and_unload()
    if device is not None:
        model.to(device)
    tokenizer = transformers.AutoTokenizer.from_pretrained(location.path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


async def _open_openai(spec: PolicySpec, options: PolicyOptions) -> OpenedPolicy:
    backend = _OpenAI(spec.target, spec.model, api_key=options.api_key, max_retries=options.max_retries,
                      timeout_s=options.timeout_s)
    try:
        served = await _served_models(backend, spec)
        entry = _pick_model(spec, served)
        backend.model = entry["id"]
        backend._agentgym_server = entry.get("owned_by") == "agentgym"
        if entry.get("max_model_len"):
            backend._max_context = int(entry["max_model_len"])
        tokenizer = _openai_tokenizer(spec, options, entry)
    except BaseException:
        await backend.aclose()
        raise
    if tokenizer is not None:
        backend.tokenizer = tokenizer
        backend.stop_ids = frozenset([tokenizer.eos_token_id])
    prompts = _prompts(tokenizer, options, None) if tokenizer is not None else None
    return OpenedPolicy(spec, backend, _sampling(options, None), prompts)


async def _served_models(backend: _OpenAI, spec: PolicySpec) -> list[dict[str, Any]]:
    try:
        data = await backend._get("/models")
    except BackendError as exc:
        raise ConfigError(f"policy {spec.text!r}: the endpoint does not answer ({exc}); start the server "
                          "(e.g. agentgym serve MODEL_DIR --port 8000) or fix the URL (it ends in /v1)") from None
    return list(data.get("data") or [])


def _pick_model(spec: PolicySpec, served: list[dict[str, Any]]) -> dict[str, Any]:
    ids = [m.get("id") for m in served]
    if not served:
        raise ConfigError(f"policy {spec.text!r}: {spec.target}/models lists no model")
    if spec.model is None:
        return served[0]
    for entry in served:
        if entry.get("id") == spec.model:
            return entry
    raise ConfigError(f"policy {spec.text!r}: the server does not serve model {spec.model!r}; it serves {ids}. "
                      f"Use openai:{spec.target}#{ids[0]}")


def _openai_tokenizer(spec: PolicySpec, options: PolicyOptions, entry: dict[str, Any]) -> Any:
    """The tokenizer for exact prompt ids: --tokenizer, else the served model's local root, else None (chat mode)."""
    import os

    source = options.tokenizer or next((p for p in (entry.get("root"), entry.get("id"))
                                        if isinstance(p, str) and os.path.isdir(p)), None)
    if source is None:
        return None
    from agentgym.errors import require

    transformers = require("transformers", extra="train", what="the tokenizer of an openai: policy")
    try:
        return transformers.AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"policy {spec.text!r}: cannot load the tokenizer from {source}: {exc}") from None


def _open_vllm(spec: PolicySpec, options: PolicyOptions) -> OpenedPolicy:
    from agentgym.policy.vllm import VLLMBackend

    location = locate_model(spec.target, None)
    backend = VLLMBackend.from_pretrained(location.path, seed=options.seed)
    return OpenedPolicy(spec, backend, _sampling(options, None), _prompts(backend.tokenizer, options, None), location)
