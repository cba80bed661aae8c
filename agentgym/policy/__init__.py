"""Policies: what turns a conversation into the next action.

- `base`: the rollout-backend interface (`Backend`, `GenerationRequest`,
  `Completion`, `SamplingParams`) that the collector and the trainer use.
- Backends: `hf` (transformers, KV cache per episode), `openai` (any
  OpenAI-compatible server), `vllm` (in-process engine), `scripted` (a Python
  callable, and a labelled timing simulation); `serve` exposes `hf` as an
  OpenAI-compatible server. Heavy backends are imported from their modules
  (``from agentgym.policy.hf import HFBackend``) so this package stays light.
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
from agentgym.policy.scripted import ScriptedBackend, SimulatedBackend
from agentgym.policy.simple import ActionFn, resolve_policy

__all__ = ["LOGPROB_CONVENTION", "ActionFn", "Backend", "BackendError", "Completion", "FinishReason",
           "GenerationRequest", "SamplingParams", "ScriptedBackend", "SimulatedBackend", "resolve_policy"]
