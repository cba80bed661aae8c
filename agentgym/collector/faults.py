"""What can go wrong in an episode, and whose fault it is.

Every failure inside one episode becomes an `EpisodeFault` with a `Failure`
type; the collector turns it into an `error` episode and every other episode
goes on. Infrastructure failures (the env raised, hung or returned garbage,
the sandbox died, the policy server is gone, one of our own timeouts fired)
are retried or masked downstream, never scored as a zero reward. An env that
reports its own backend broke (`EnvInfraError`) ends its episode as
``truncated`` (not ``error``): the env worked as designed. Model
failures (a malformed action the env refused to handle, the turn limit, the
context length) are a legitimate training signal.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import math
import numbers
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from agentgym.core import AgentEnv
from agentgym.errors import EnvInfraError, MalformedActionError
from agentgym.trajectory import EpisodeStatus, Failure

T = TypeVar("T")


class EpisodeFault(Exception):
    """One episode cannot go on; `failure` says whose fault it is."""

    def __init__(self, reason: str, failure: Failure = Failure.INFRA, status: EpisodeStatus = EpisodeStatus.ERROR,
                 infra_kind: str | None = None):
        super().__init__(reason)
        self.reason = reason
        self.failure = failure
        self.status = status
        #: the `EnvInfraError.kind` when the env reported its backend broke
        self.infra_kind = infra_kind


def describe(exc: BaseException) -> str:
    """``Type: message`` of an exception, one line."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


async def bounded(what: str, awaitable: Awaitable[T], timeout_s: float | None) -> T:
    """Await `awaitable` within `timeout_s`; a timeout is an infrastructure fault naming `what`."""
    try:
        async with asyncio.timeout(timeout_s):
            return await awaitable
    except TimeoutError:
        raise EpisodeFault(f"{what} did not answer within {timeout_s:g} s (our timeout)") from None


def runs_inline(env: Any, method: str) -> bool:
    """Whether `env.<method>` is a native coroutine (not the base class's thread wrapper)."""
    inner = type(getattr(env, "unwrapped", env))
    return isinstance(env, AgentEnv) and getattr(inner, method) is not getattr(AgentEnv, method)


async def call_env(what: str, env: Any, sync: Callable[[], T], native: Callable[[], Awaitable[T]] | None,
                   executor: concurrent.futures.Executor, timeout_s: float | None) -> T:
    """Run one env call (natively async when the env has it, else in `executor`) with a timeout.

    Exceptions become faults: `MalformedActionError` is the model's,
    `EnvInfraError` a truncation by infrastructure, anything else the env's
    error (infrastructure).
    """
    loop = asyncio.get_running_loop()
    pending = native() if native is not None else loop.run_in_executor(executor, sync)
    try:
        return await bounded(what, pending, timeout_s)
    except EpisodeFault:
        raise
    except EnvInfraError as exc:
        raise EpisodeFault(f"{what}: {exc.reason}", Failure.INFRA, EpisodeStatus.TRUNCATED, exc.kind) from exc
    except MalformedActionError as exc:
        raise EpisodeFault(f"{what}: malformed action: {exc}", Failure.MODEL) from exc
    except Exception as exc:
        raise EpisodeFault(f"{what} raised {describe(exc)}") from exc


def check_reset(result: Any) -> tuple[str, dict[str, Any]]:
    """``(observation, info)`` from what `reset` returned, or a fault saying what was wrong."""
    if not (isinstance(result, tuple) and len(result) == 2):
        raise EpisodeFault(f"env.reset returned garbage: expected (observation, info), got {_show(result)}")
    observation, info = result
    _check_observation("reset", observation)
    _check_info("reset", info)
    return observation, dict(info)


def check_step(result: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """The 5-tuple `step` must return, validated, or a fault saying what was wrong."""
    if not (isinstance(result, tuple) and len(result) == 5):
        raise EpisodeFault("env.step returned garbage: expected (observation, reward, terminated, truncated, info), "
                           f"got {_show(result)}")
    observation, reward, terminated, truncated, info = result
    _check_observation("step", observation)
    if isinstance(reward, bool) or not isinstance(reward, numbers.Real) or not math.isfinite(float(reward)):
        raise EpisodeFault(f"env.step returned garbage: reward must be a finite number, got {_show(reward)}")
    for name, flag in (("terminated", terminated), ("truncated", truncated)):
        if not isinstance(flag, bool) and type(flag).__name__ != "bool_":
            raise EpisodeFault(f"env.step returned garbage: {name} must be a bool, got {_show(flag)}")
    _check_info("step", info)
    return observation, float(reward), bool(terminated), bool(truncated), dict(info)


def _check_observation(method: str, observation: Any) -> None:
    if not isinstance(observation, str):
        raise EpisodeFault(f"env.{method} returned garbage: the observation must be text, got {_show(observation)}")


def _check_info(method: str, info: Any) -> None:
    if not isinstance(info, dict):
        raise EpisodeFault(f"env.{method} returned garbage: info must be a dict, got {_show(info)}")


def _show(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60] + '...' if len(text) > 60 else text}"
