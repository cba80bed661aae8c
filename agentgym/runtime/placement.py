"""Where an env runs: in the caller's process (threads) or in worker processes, chosen per env class.

`env_runtime` (a collector setting, also in the training config):

- ``"auto"`` (default): a worker process per env unless the env class
  declares ``thread_safe = True`` (agentgym's own envs do);
- ``"process"``: always a worker process;
- ``"thread"``: always in-process, stepped on the collector's thread pool
  (only for envs whose instances share no state).

A registered id runs in a worker by its entry point (a ``"module:Attr"``
string, imported again in the worker; a callable entry point must be
picklable). A zero-argument factory runs in-process unless ``"process"`` is
asked for, since its thread safety cannot be known without making one.
"""

from __future__ import annotations

import functools
import logging
import pickle
from collections.abc import Callable
from typing import Any

from agentgym.errors import ConfigError
from agentgym.registration import EnvSpec

log = logging.getLogger("agentgym.runtime")


def needs_process(spec: EnvSpec, runtime: str) -> bool:
    """Whether envs of `spec` run in worker processes under `runtime`."""
    if runtime == "thread":
        return False
    if runtime == "process":
        return True
    return not bool(getattr(spec.load(), "thread_safe", False))


def isolated_factory(spec: EnvSpec, kwargs: dict[str, Any], runtime: str, call_timeout_s: float | None,
                     start_timeout_s: float | None = None) -> Callable[[], Any] | None:
    """A factory of `ProcessEnv`s for `spec`, or None when it runs in-process under `runtime`."""
    if not needs_process(spec, runtime):
        return None
    entry_point = spec.entry_point
    if not isinstance(entry_point, str) and not _picklable(entry_point):
        if runtime == "process":
            raise ConfigError(f"env '{spec.id}': its entry point {entry_point!r} cannot be sent to a worker process "
                              "(it does not pickle); register it as a 'module:Attr' string")
        log.warning("env '%s' is not declared thread_safe but its entry point does not pickle, so it runs "
                    "in-process; register it as a 'module:Attr' string to isolate it", spec.id)
        return None
    return functools.partial(_make_process_env, entry_point, {**spec.kwargs, **kwargs}, spec.id, call_timeout_s,
                             start_timeout_s)


def process_factory(factory: Callable[[], Any], env_id: str, call_timeout_s: float | None,
                    start_timeout_s: float | None = None) -> Callable[[], Any]:
    """A factory of `ProcessEnv`s that each run `factory()` in a worker (which must pickle)."""
    if not _picklable(factory):
        raise ConfigError(f"env factory {factory!r} cannot be sent to a worker process (it does not pickle); pass a "
                          "registered env id, or a module-level function or functools.partial")
    return functools.partial(_make_process_env, factory, {}, env_id, call_timeout_s, start_timeout_s)


def _make_process_env(entry_point: Any, kwargs: dict[str, Any], env_id: str, call_timeout_s: float | None,
                      start_timeout_s: float | None) -> Any:
    from agentgym.runtime.process import ProcessEnv

    return ProcessEnv(entry_point, kwargs, env_id=env_id, call_timeout_s=call_timeout_s,
                      start_timeout_s=start_timeout_s)


def _picklable(obj: Any) -> bool:
    try:
        pickle.dumps(obj)
    except Exception:
        return False
    return True
