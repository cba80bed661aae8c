"""Env workers: Ray actors that are env servers, so the collector reaches them as it reaches any env server.

An `EnvWorker` serves one env id with the env server of `agentgym.runtime.server`
(HTTP + WebSocket, docs/env-protocol.md) on its node's address and a free
port, in a thread of the actor. Sessions are placed as everywhere else
(`agentgym.runtime.placement`): an env that is not declared ``thread_safe``
gets a worker process per session. Rollout workers ask each env worker for
its `endpoint` and drive the envs through `agentgym.runtime.cluster.EnvPool`,
the same `RemoteEnv` clients and least-loaded spreading that
``env_endpoints`` and ``env_cluster`` use: one env code path and one protocol
in-process, in a process, in a container and on Ray, with the same typed
faults (a dead env worker is ``connection_lost``, an infrastructure failure
of the episodes it held).

Ray restarts an env worker whose process died (`RaySettings.actor_restarts`); the
new one serves on another port. The pool asks the workers for their endpoints
again when a server cannot be reached before an episode began (`EnvPool.refresh`),
waiting for a restarting worker, so new episodes go to the restarted server.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

#: how long the pool waits for a restarting env worker to answer with its new endpoint (seconds)
RESTART_WAIT_S = 180.0


class EnvWorker:
    """Actor body: an env server of `env_id` on this node (see the module docstring)."""

    def __init__(self, env_id: str, env_kwargs: dict[str, Any], env_runtime: str = "auto", max_sessions: int = 256):
        from agentgym.registration import registry
        from agentgym.runtime.server import ServerThread, server_factory

        spec = registry[env_id]
        factory = server_factory(spec, dict(env_kwargs), env_runtime, call_timeout_s=None)
        self.server = ServerThread(spec.id, factory, host=node_address(), max_sessions=max_sessions,
                                   idle_timeout_s=None)

    def endpoint(self) -> str:
        """The env server URL of this worker (``http://NODE_IP:PORT/ENV_ID``)."""
        return self.server.url

    def open_envs(self) -> int:
        """How many sessions (envs) are open (for tests and meters)."""
        return len(self.server.env.sessions.sessions)

    def stop(self) -> None:
        self.server.stop()


def node_address() -> str:
    """This Ray node's address (other nodes reach the env server there), 127.0.0.1 outside Ray."""
    try:
        import ray

        return ray.util.get_node_ip_address() if ray.is_initialized() else "127.0.0.1"
    except ImportError:
        return "127.0.0.1"


def env_pool(env_id: str, env_workers: list[Any], call_timeout_s: float | None = 60.0) -> Any:
    """The collector's env factory over `env_workers` (their endpoints, through `EnvPool`); episodes name `env_id`;
    an env call past `call_timeout_s` (the run's turn limit) is ended by the env worker (its session's process
    killed)."""
    from agentgym.runtime.cluster import EnvPool

    return EnvPool(endpoints(env_workers), env_id=env_id, resolve=lambda: endpoints(env_workers),
                   call_timeout_s=call_timeout_s)


def endpoints(env_workers: list[Any], wait_s: float = RESTART_WAIT_S) -> list[str]:
    """The env workers' endpoints, waiting up to `wait_s` for workers that Ray is restarting."""
    import ray

    deadline = time.monotonic() + wait_s
    while True:
        try:
            return ray.get([worker.endpoint.remote() for worker in env_workers], timeout=wait_s)
        except ray.exceptions.RayActorError:  # restarting (or dead for good: given up at the deadline)
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


async def await_ref(ref: Any) -> Any:
    """Await a Ray object ref from any event loop."""
    return await asyncio.wrap_future(ref.future())
