"""agentgym: train LLM agents with reinforcement learning on multi-turn environments.

The public surface: the env contract (`AgentEnv`, `UnicodeText`), the registry
(`register`, `make`, `registry`, `spec`), the trajectory model (`Episode`,
`Turn`) and the store (`TrajectoryStore`). Importing agentgym imports neither
torch nor docker, and the store (SQLAlchemy) only when it is first used: an env's worker process, which
never opens a store, starts about 0.8 s sooner.
"""

from agentgym.core import AgentEnv, fingerprint_text
from agentgym.errors import (
    AgentGymError,
    ConfigError,
    MalformedActionError,
    StoreError,
    UnknownEnvError,
)
from agentgym.importing import lazy_attributes
from agentgym.registration import EnvSpec, make, register, registry, spec
from agentgym.runtime.remote import RemoteEnv
from agentgym.spaces import UnicodeText
from agentgym.trajectory import Episode, EpisodeStatus, Failure, Turn

__version__ = "0.1.0"

__all__ = [
    "AgentEnv", "AgentGymError", "ConfigError", "EnvSpec", "Episode", "EpisodeFilter", "EpisodeStatus",
    "Failure", "MalformedActionError", "RemoteEnv", "StoreError", "TrajectoryStore", "Turn", "UnicodeText",
    "UnknownEnvError", "fingerprint_text", "make", "register", "registry", "spec",
]

__getattr__ = lazy_attributes(__name__, {"EpisodeFilter": "agentgym.store", "TrajectoryStore": "agentgym.store"})


registry.load_plugins()
