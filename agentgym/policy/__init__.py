"""Policies: what turns a conversation into the next action.

- `base`: the rollout-backend interface (`Backend`, `GenerationRequest`,
  `Completion`, `SamplingParams`) that the collector and the trainer use.
- Backends: `hf` (transformers, KV cache per episode), `openai` (any
  OpenAI-compatible server), `vllm` (in-process engine), `scripted` (a Python
  callable, and a labelled timing simulation); `serve` exposes `hf` as an
  OpenAI-compatible server. Heavy backends are imported from their modules
  (``from agentgym.policy.hf import HFBackend``) so this package stays light.
- `spec` / `loading`: the policy grammar (``hf:RUN@latest``, ``openai:URL#MODEL`` ...) and
  `open_policy`, which turns a spec into a checked, ready backend.
- `simple`: the text-level policies used for demonstrations, tests and env
  debugging (`random`, `solver`, `scripted:MODULE:FUNC`).
"""

from agentgym.policy.base import (
    LOGPROB_CONVENTION,
    Backend,
    BackendError,
    Completion,
    FinishReason,
    GenerationRequest,
    SamplingParams,
)
from agentgym.policy.loading import OpenedPolicy, PolicyOptions, open_policy
from agentgym.policy.scripted import ScriptedBackend, SimulatedBackend
from agentgym.policy.simple import ActionFn, resolve_policy
from agentgym.policy.spec import PolicySpec, parse_policy

__all__ = ["LOGPROB_CONVENTION", "ActionFn", "Backend", "BackendError", "Completion", "FinishReason",
           "GenerationRequest", "OpenedPolicy", "PolicyOptions", "PolicySpec", "SamplingParams", "ScriptedBackend",
           "SimulatedBackend", "open_policy", "parse_policy", "resolve_policy"]
