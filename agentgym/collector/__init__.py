"""The collector: envs x policy -> recorded Episodes (groups, partial rollouts, branching).

See `agentgym.collector.collector` for the tour.
"""

from agentgym.collector.collector import Collector, Group
from agentgym.collector.config import CollectorConfig, CollectResult, Task
from agentgym.collector.faults import EpisodeFault
from agentgym.collector.replay import BranchError
from agentgym.collector.turns import DynamicTurns, FixedTurns, TurnControl, making_progress

__all__ = ["BranchError", "CollectResult", "Collector", "CollectorConfig", "DynamicTurns", "EpisodeFault",
           "FixedTurns", "Group", "Task", "TurnControl", "making_progress"]
