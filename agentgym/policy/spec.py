"""The policy grammar: one string names a policy wherever a policy is accepted.

`agentgym rollout`, `agentgym replay --from-turn`, `agentgym eval` and the
Python API (`agentgym.policy.open_policy`) all parse the same specs:

=============================  ===============================================================
``random``                     uniform over the env's valid actions (text level, no tokens)
``solver``                     the env's built-in optimal action (text level)
``scripted:MODULE:FUNC``       a Python function from the conversation to the action text
``hf:PATH``                    a transformers model directory, loaded in-process
``hf:RUN_DIR@latest``          the newest checkpoint of a training run (``runs/quickstart@latest``)
``hf:RUN_DIR@update-50``       the checkpoint written after update 50
``hf:RUN_DIR@sft``             the model right after the run's SFT warm start
``openai:URL[#MODEL]``         any OpenAI-compatible server (``agentgym serve``, vLLM, SGLang)
``vllm:PATH``                  an in-process vLLM engine on a model directory
=============================  ===============================================================

`parse_policy` checks only the grammar (no file, server or import is
touched); `agentgym.policy.loading.open_policy` then turns a spec into a
`Backend`, failing before any episode with an error that names the problem.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from agentgym.errors import ConfigError

TEXT_KINDS = ("random", "solver", "scripted")
MODEL_KINDS = ("hf", "openai", "vllm")
GRAMMAR = ("random | solver | scripted:MODULE:FUNC | hf:PATH[@latest|@update-N|@sft] | openai:URL[#MODEL] | "
           "vllm:PATH")
_REF = re.compile(r"^(latest|sft|update-\d+)$")


@dataclass(frozen=True)
class PolicySpec:
    """A parsed policy spec (see the module docstring)."""

    text: str  #: the spec as written
    kind: str  #: random, solver, scripted, hf, openai or vllm
    target: str = ""  #: MODULE:FUNC, a model path, a run directory or a server URL
    model: str | None = None  #: openai: the model id to ask the server for (None: the server's first)
    ref: str | None = None  #: hf: which checkpoint of a run directory (latest, sft, update-N)

    @property
    def is_model(self) -> bool:
        """Samples tokens (hf, openai, vllm), as opposed to the text-level policies."""
        return self.kind in MODEL_KINDS

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.text, "kind": self.kind, "target": self.target, "model": self.model, "ref": self.ref}


def parse_policy(text: str) -> PolicySpec:
    """Parse `text`; `ConfigError` naming the grammar when it does not fit."""
    spec = (text or "").strip()
    if spec in ("random", "solver"):
        return PolicySpec(spec, spec)
    kind, sep, rest = spec.partition(":")
    if not sep or kind not in ("scripted", *MODEL_KINDS):
        raise ConfigError(f"unknown policy {text!r}; a policy is one of: {GRAMMAR}")
    if not rest:
        raise ConfigError(f"policy {text!r} names no {_what(kind)} after '{kind}:'; e.g. {_example(kind)}")
    if kind == "scripted":
        return PolicySpec(spec, kind, rest)
    if kind == "openai":
        return _openai(spec, rest)
    target, ref = rest, None
    head, at, tail = rest.rpartition("@")
    if at and _REF.match(tail):
        target, ref = head, tail
    elif at and kind == "hf" and "/" not in tail:
        raise ConfigError(f"policy {text!r}: unknown checkpoint '@{tail}'; use @latest, @update-N or @sft")
    if kind == "vllm" and ref is not None:
        raise ConfigError(f"policy {text!r}: vllm takes a model directory; point it at RUN/checkpoints/update-N/policy")
    return PolicySpec(spec, kind, target, ref=ref)


def _openai(spec: str, rest: str) -> PolicySpec:
    url, _, model = rest.partition("#")
    if not re.match(r"^https?://[^/\s]+", url):
        raise ConfigError(f"policy {spec!r}: the server URL must start with http:// or https://, "
                          "e.g. openai:http://127.0.0.1:8000/v1#my-model")
    return PolicySpec(spec, "openai", url.rstrip("/"), model=model or None)


def _what(kind: str) -> str:
    return {"scripted": "MODULE:FUNC", "openai": "server URL"}.get(kind, "model path")


def _example(kind: str) -> str:
    return {"scripted": "scripted:mypkg.policies:always_up", "openai": "openai:http://127.0.0.1:8000/v1",
            "hf": "hf:runs/quickstart@latest", "vllm": "vllm:/models/qwen2.5-0.5b"}[kind]
