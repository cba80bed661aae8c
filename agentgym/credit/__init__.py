"""Credit assignment: turn outcome rewards into per-turn (and per-token) advantages.

    from agentgym.credit import compute_advantages, ESTIMATORS
    adv = compute_advantages("gigpo", episodes, omega=1.0, gamma=0.95)   # one list per episode
    result = compute_credit("gae", episodes, values=critic_values)     # + returns, parts, ...

Estimators (docs/algorithms.md): grpo, dr_grpo, rloo, gae, gigpo, spa, oprl, trace. Each is a pure
function over a `TurnBatch` registered by name in `ESTIMATORS`. The learned parts (SPA's progress
estimator, OPRL's implicit PRM, TRACE's LM predictor) live in `agentgym.credit.learned` and need
the `train` extra; importing `agentgym.credit` imports no torch.
"""

from agentgym.credit import baselines, gae, gigpo, oprl, spa, trace  # noqa: F401  (register estimators)
from agentgym.credit.batch import TurnBatch
from agentgym.credit.errors import CreditInputError, CreditParamError, UnknownEstimatorError
from agentgym.credit.registry import (
    ESTIMATORS,
    Estimator,
    EstimatorRegistry,
    compute_advantages,
    compute_credit,
    register_estimator,
)
from agentgym.credit.result import CreditResult
from agentgym.credit.token_advantages import TokenAdvantages, flat_token_advantages, token_advantages
from agentgym.credit.trace_alloc import BranchRequest, ObserveStats, RootRequest, TraceAllocator
from agentgym.credit.trace_predict import BetaPosterior, Prefix, PrefixPredictor, SuccessPredictor

__all__ = [
    "ESTIMATORS", "BetaPosterior", "BranchRequest", "CreditInputError", "CreditParamError", "CreditResult",
    "Estimator", "EstimatorRegistry", "ObserveStats", "Prefix", "PrefixPredictor", "RootRequest",
    "SuccessPredictor", "TokenAdvantages", "TraceAllocator", "TurnBatch", "UnknownEstimatorError",
    "compute_advantages", "compute_credit", "flat_token_advantages", "register_estimator", "token_advantages",
]
