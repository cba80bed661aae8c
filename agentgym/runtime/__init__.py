"""The env runtime: where envs run and how the collector reaches them.

- `ProxyEnv`: an `AgentEnv` whose real env lives elsewhere.
- `ProcessEnv`: one env per worker process (the default for envs that are not
  declared ``thread_safe``), see `agentgym.runtime.process`.
- `RemoteEnv`: an env on an env server (``agentgym envs serve``), see
  `agentgym.runtime.remote` and `agentgym.runtime.server`.
- `agentgym.runtime.placement`: the ``env_runtime`` setting (auto, process, thread).
- `agentgym.runtime.cluster`: env server containers (`EnvCluster`, ``agentgym envs
  up``) and `EnvPool`, the collector's env factory over replicas or endpoints;
  the image is built by `agentgym.runtime.images` from docker/env.
- `agentgym.runtime.openenv`: any OpenEnv server as an agentgym env.

Every transport fault (a dead worker, a hung call, a lost connection) is an
`EnvInfraError`: the collector ends only that episode, as truncated with
``failure="infra"``.
"""

from agentgym.runtime.process import ProcessEnv
from agentgym.runtime.proxy import ProxyEnv
from agentgym.runtime.remote import RemoteEnv

__all__ = ["ProcessEnv", "ProxyEnv", "RemoteEnv"]
