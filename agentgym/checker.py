"""`agentgym envs check`: Gymnasium's `check_env` plus agentgym's own contract checks.

Every check makes fresh env instances from a factory, so one check cannot
poison the next. `check_env_contract` returns a report; nothing raises.
"""

from __future__ import annotations

import asyncio
import random
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gymnasium.utils.env_checker import check_env as gymnasium_check_env

from agentgym.core import ACTION_FORMATS, AgentEnv
from agentgym.splits import check_splits

MALFORMED_ACTIONS = ("", "}{ not an action <tool_call>{oops", "\x00\x01 🤖" * 3)


@dataclass
class CheckResult:
    name: str
    passed: bool
    detail: str = ""
    skipped: bool = False


@dataclass
class CheckReport:
    env_id: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed or r.skipped for r in self.results)

    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if not (r.passed or r.skipped)]


def _inner(env: Any) -> Any:
    return env.unwrapped


def _first_task(env: Any) -> str | None:
    tasks = list(_inner(env).task_ids()) if isinstance(_inner(env), AgentEnv) else []
    return tasks[0] if tasks else None


def _action_plan(factory: Callable[[], Any], seed: int, task: str | None, turns: int) -> list[str]:
    """Actions to drive the determinism check: the solver's where there is one, else random valid ones."""
    env = factory()
    try:
        env.reset(seed=seed, options={"task_id": task} if task else None)
        inner, rng, plan = _inner(env), random.Random(seed), []
        for _ in range(turns):
            if isinstance(inner, AgentEnv) and inner.has_solver and rng.random() < 0.5:
                action = inner.solver_action()
            elif isinstance(inner, AgentEnv) and inner.valid_actions():
                action = rng.choice(inner.valid_actions())
            else:
                env.action_space.seed(rng.randrange(2**31))
                action = env.action_space.sample()
            plan.append(action)
            _, _, terminated, truncated, _ = env.step(action)
            if terminated or truncated:
                break
        return plan
    finally:
        env.close()


def _trace(factory: Callable[[], Any], seed: int, task: str | None, plan: list[str]) -> list[tuple[str, float, bool, bool, str]]:
    env = factory()
    try:
        obs, _ = env.reset(seed=seed, options={"task_id": task} if task else None)
        inner = _inner(env)
        out = [(obs, 0.0, False, False, inner.state_fingerprint() if isinstance(inner, AgentEnv) else "")]
        for action in plan:
            obs, reward, terminated, truncated, _ = env.step(action)
            fp = inner.state_fingerprint() if isinstance(inner, AgentEnv) else ""
            out.append((obs, float(reward), bool(terminated), bool(truncated), fp))
            if terminated or truncated:
                break
        return out
    finally:
        env.close()


def check_determinism(factory: Callable[[], Any], *, seed: int = 0, turns: int = 12) -> CheckResult:
    """Same seed, task and actions must give the same observations, rewards and fingerprints."""
    probe = factory()
    inner = _inner(probe)
    tasks = list(inner.task_ids()) if isinstance(inner, AgentEnv) else []
    declared = getattr(inner, "deterministic", True)
    probe.close()
    if not declared:
        return CheckResult("determinism", True, "the env declares deterministic = False", skipped=True)
    total = 0
    for task in dict.fromkeys([tasks[0], tasks[-1]] if tasks else [None]):
        plan = _action_plan(factory, seed, task, turns)
        total += len(plan)
        first, second = _trace(factory, seed, task, plan), _trace(factory, seed, task, plan)
        names = ("observation", "reward", "terminated", "truncated", "state_fingerprint")
        for turn, (a, b) in enumerate(zip(first, second, strict=False)):
            for name, x, y in zip(names, a, b, strict=True):
                if x != y:
                    where = "reset" if turn == 0 else f"turn {turn - 1}"
                    return CheckResult("determinism", False,
                                       f"two runs with seed {seed}, task {task!r} and the same actions diverged at "
                                       f"{where}: {name} {x!r} != {y!r}. Seed every random choice from reset's seed "
                                       "(self.np_random), or set `deterministic = False` on the env class")
        if len(first) != len(second):
            return CheckResult("determinism", False, f"the two runs ended after {len(first)} and {len(second)} steps")
    return CheckResult("determinism", True, f"{total} actions replayed identically")


def check_fingerprint(factory: Callable[[], Any], *, seed: int = 0) -> CheckResult:
    env = factory()
    try:
        inner = _inner(env)
        if not isinstance(inner, AgentEnv):
            return CheckResult("state_fingerprint", False, f"{type(inner).__name__} is not an agentgym.AgentEnv")
        task = _first_task(env)
        env.reset(seed=seed, options={"task_id": task} if task else None)
        a, b = inner.state_fingerprint(), inner.state_fingerprint()
        if not isinstance(a, str) or not a:
            return CheckResult("state_fingerprint", False, f"state_fingerprint() must return a non-empty str, got {a!r}")
        if a != b:
            return CheckResult("state_fingerprint", False, "state_fingerprint() changed without a step")
        env.reset(seed=seed, options={"task_id": task} if task else None)
        if inner.state_fingerprint() != a:
            return CheckResult("state_fingerprint", False, "the same reset gave a different state_fingerprint()")
        return CheckResult("state_fingerprint", True, "stable across calls and resets")
    finally:
        env.close()


def check_malformed_actions(factory: Callable[[], Any], *, seed: int = 0) -> CheckResult:
    """Odd replies give an answer, never an exception; what counts as an answer depends on `action_format`.

    ``tool_calls`` envs must flag a malformed reply with ``info["error_kind"]``;
    ``free_text`` envs (a text adventure answers anything in its own words)
    need only give a non-empty observation and keep the episode going.
    """
    env = factory()
    try:
        free_text = getattr(_inner(env), "action_format", "tool_calls") == "free_text"
        task = _first_task(env)
        env.reset(seed=seed, options={"task_id": task} if task else None)
        for action in MALFORMED_ACTIONS:
            try:
                obs, _, terminated, truncated, info = env.step(action)
            except Exception as exc:
                fix = ("answer it in the env's own words" if free_text else "return an error observation instead "
                       "(agentgym.toolcalls.error_observation) and set info['error_kind']")
                return CheckResult("malformed_action", False, f"step({action!r}) raised {exc!r}; {fix}")
            if not isinstance(obs, str) or not obs.strip():
                return CheckResult("malformed_action", False, f"step({action!r}) gave an empty observation")
            if free_text and (terminated or truncated):
                return CheckResult("malformed_action", False,
                                   f"step({action!r}) ended the episode; a free-text env answers an odd reply "
                                   "and the episode goes on")
            if not free_text and not info.get("error_kind") and not terminated:
                return CheckResult("malformed_action", False,
                                   f"step({action!r}) was accepted without info['error_kind']; a malformed action "
                                   "must be reported to the model (or declare action_format = 'free_text' if "
                                   "every reply is a legitimate action)")
            if terminated:
                break
        if free_text:
            return CheckResult("malformed_action", True, "free text: odd replies are answered and the episode goes on")
        return CheckResult("malformed_action", True, "malformed actions give error observations")
    finally:
        env.close()


def check_action_format(factory: Callable[[], Any]) -> CheckResult:
    """`action_format` is one of the declared formats."""
    env = factory()
    try:
        value = getattr(_inner(env), "action_format", "tool_calls")
        if value not in ACTION_FORMATS:
            return CheckResult("action_format", False, f"action_format = {value!r}; declare one of {ACTION_FORMATS}")
        return CheckResult("action_format", True, str(value))
    finally:
        env.close()


def check_close_idempotent(factory: Callable[[], Any]) -> CheckResult:
    env = factory()
    try:
        env.reset(seed=0)
        env.close()
        env.close()
    except Exception as exc:
        return CheckResult("close", False, f"calling close() twice raised {exc!r}")
    return CheckResult("close", True, "close() is idempotent")


def check_snapshot(factory: Callable[[], Any], *, seed: int = 0) -> CheckResult:
    env = factory()
    try:
        inner = _inner(env)
        if not isinstance(inner, AgentEnv) or not inner.supports_snapshot:
            return CheckResult("snapshot", True, "no snapshot(); branching replays the action prefix", skipped=True)
        task = _first_task(env)
        env.reset(seed=seed, options={"task_id": task} if task else None)
        plan = _action_plan(factory, seed, task, 4)
        for action in plan[:2]:
            env.step(action)
        token, before = inner.snapshot(), inner.last_observation
        after_steps = [env.step(a)[0] for a in plan[2:]]
        restored = inner.restore(token)
        if restored != before:
            return CheckResult("snapshot", False, "restore() did not give back the observation of the snapshot")
        again = [env.step(a)[0] for a in plan[2:]]
        if again != after_steps:
            return CheckResult("snapshot", False, "after restore(), the same actions gave different observations")
        return CheckResult("snapshot", True, "restore() returns to the snapshot's state")
    finally:
        env.close()


def check_async(factory: Callable[[], Any], *, seed: int = 0) -> CheckResult:
    env = factory()
    try:
        inner = _inner(env)
        task = _first_task(env)

        async def run() -> tuple[Any, Any]:
            obs, _ = await inner.areset(seed=seed, options={"task_id": task} if task else None)
            step = await inner.astep("")
            return obs, step

        obs, step = asyncio.run(run())
        if not isinstance(obs, str) or len(step) != 5:
            return CheckResult("async", False, "areset/astep did not return reset/step-shaped results")
        return CheckResult("async", True, "areset/astep work")
    except Exception as exc:
        return CheckResult("async", False, f"areset/astep raised {exc!r}")
    finally:
        env.close()


def check_task_splits(factory: Callable[[], Any]) -> CheckResult:
    """The train / eval / test splits are disjoint, inside `task_ids()`, and the same on every instance."""
    passed, detail = check_splits(factory)
    return CheckResult("task_splits", passed, detail)


def check_gymnasium(factory: Callable[[], Any]) -> CheckResult:
    """Gymnasium's own `check_env` on a fresh env (its warnings are the result's detail)."""
    env = factory()
    try:
        return _gymnasium_result(env)
    finally:
        env.close()


def _gymnasium_result(env: Any) -> CheckResult:
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gymnasium_check_env(env.unwrapped, skip_render_check=True)
    except Exception as exc:
        return CheckResult("gymnasium.check_env", False, f"{type(exc).__name__}: {exc}")
    notes = "; ".join(sorted({str(w.message)[:120] for w in caught}))
    return CheckResult("gymnasium.check_env", True, notes or "no warnings")


def check_env_contract(env_id: str, factory: Callable[[], Any]) -> CheckReport:
    """Run every check on envs made by `factory`; the report says which passed."""
    report = CheckReport(env_id)
    env = factory()
    try:
        if not isinstance(env.unwrapped, AgentEnv):
            report.results.append(CheckResult("agentenv", False,
                                              f"{type(env.unwrapped).__name__} does not subclass agentgym.AgentEnv"))
        report.results.append(_gymnasium_result(env))
    finally:
        env.close()
    for check in (check_action_format, check_determinism, check_fingerprint, check_malformed_actions, check_snapshot,
                  check_async, check_task_splits):
        try:
            report.results.append(check(factory))
        except Exception as exc:
            report.results.append(CheckResult(check.__name__.removeprefix("check_"), False, f"crashed: {exc!r}"))
    report.results.append(check_close_idempotent(factory))
    return report
