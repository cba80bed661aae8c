"""The data manager and its curation rules: where collection and training meet.

See `agentgym.data.manager` for the protocol (push / pull / cursor) and
`agentgym.data.curation` for the rules (zero variance, dynamic rollouts,
high-entropy steps, mixing in stored successes).
"""

from agentgym.data.curation import (
    Curation,
    dynamic_rollouts,
    mix_in_success,
    select_high_entropy_steps,
    zero_variance,
)
from agentgym.data.manager import Cursor, DataManager, RetryRequest, TrainBatch, episode_version
from agentgym.data.meters import PipelineMetrics

__all__ = ["Curation", "Cursor", "DataManager", "PipelineMetrics", "RetryRequest", "TrainBatch",
           "dynamic_rollouts", "episode_version", "mix_in_success", "select_high_entropy_steps", "zero_variance"]
