"""Learned parts of credit assignment (need the `train` extra: torch, transformers).

- `ProgressEstimator`: SPA's per-turn progress contributions (docs/algorithms.md, section 2.4).
- `ImplicitPRM`: OPRL's implicit process reward model (section 3).
- `LMSuccessPredictor`: TRACE's success-probability predictor as a tiny LM (section 4).

Each has `update(batch)` (one trainer iteration), `state_dict()` / `load_state_dict()` for
checkpoints, and takes its backbone (a model directory, a hub name or a loaded causal LM) from its
arguments.
"""

from agentgym.credit.learned.backbone import CreditModelStats, load_backbone
from agentgym.credit.learned.predictor import LMSuccessPredictor
from agentgym.credit.learned.prm import ImplicitPRM
from agentgym.credit.learned.progress import ProgressEstimator
from agentgym.credit.learned.synthetic import synthetic_token_episodes

__all__ = ["ImplicitPRM", "LMSuccessPredictor", "ProgressEstimator", "CreditModelStats", "load_backbone",
           "synthetic_token_episodes"]
