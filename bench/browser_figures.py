"""Browser-v0 figures for bench/envs.py: context start, steps/s, observation size, memory, concurrency.

Everything runs the local task sites with their scripted solvers in real
headless Chromium. Observation tokens are estimated as characters / 4 (no
tokenizer download here); pruned and unpruned sizes come from the same pages.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _solve(env: Any, task_id: str, seed: int, pages: list[Any] | None = None) -> tuple[int, float, float]:
    """(steps, seconds inside step, reward) of one solver episode; `pages` collects every page view."""
    env.reset(seed=seed, options={"task_id": task_id})
    steps, spent, reward = 0, 0.0, 0.0
    while True:
        if pages is not None:
            pages.append(env._view)  # noqa: SLF001 - the bench reads the page the agent saw
        action = env.solver_action()
        start = time.perf_counter()
        _, reward, terminated, truncated, _ = env.step(action)
        spent += time.perf_counter() - start
        steps += 1
        if terminated or truncated:
            return steps, spent, float(reward)


def context_and_steps(episodes: int) -> dict[str, Any]:
    from agentgym.envs.browser.env import BrowserEnv
    from agentgym.envs.browser.observation import render

    env = BrowserEnv()
    tasks = env.task_ids()[:: max(1, len(env.task_ids()) // episodes)][:episodes]
    starts, steps, spent, pages = [], 0, 0.0, []
    try:
        env.reset(seed=0, options={"task_id": tasks[0]})  # warm-up: the browser launch is not a context start
        for i, task in enumerate(tasks):
            _, info = env.reset(seed=i, options={"task_id": task})
            starts.append(info["context_start_s"])
            n, s, _ = _solve(env, task, i, pages)
            steps, spent = steps + n, spent + s
    finally:
        env.close()
    pruned = [len(render(p, prune=True, max_chars=10**9)) / 4 for p in pages]
    full = [len(render(p, prune=False, max_chars=10**9)) / 4 for p in pages]
    return {"context_start_p50_s": _pct(starts, 0.5), "context_start_p99_s": _pct(starts, 0.99),
            "steps_per_s": steps / spent, "episodes": len(tasks),
            "obs_tokens_pruned_mean": statistics.mean(pruned), "obs_tokens_pruned_p99": _pct(pruned, 0.99),
            "obs_tokens_unpruned_mean": statistics.mean(full), "obs_tokens_unpruned_p99": _pct(full, 0.99),
            "pages_measured": len(pages)}


def memory_per_episode(concurrent: int) -> dict[str, Any]:
    """PSS of the Chromium processes with `concurrent` open episodes, over the idle browser's."""
    from agentgym.envs.browser.driver import memory_mib
    from agentgym.envs.browser.env import BrowserEnv

    envs = [BrowserEnv(sites=("shop",)) for _ in range(concurrent)]
    try:
        envs[0].reset(seed=0)
        envs[0].close()
        idle = memory_mib()
        for i, env in enumerate(envs):
            env.reset(seed=i)
        busy = memory_mib()
    finally:
        for env in envs:
            env.close()
    return {"memory_idle_browser_mib": idle, "memory_per_episode_mib": (busy - idle) / concurrent,
            "memory_episodes_open": concurrent}


async def _concurrent(n: int) -> dict[str, Any]:
    from agentgym.envs.browser.env import BrowserEnv

    envs = [BrowserEnv() for _ in range(n)]
    tasks = envs[0].task_ids()[:: max(1, len(envs[0].task_ids()) // n)][:n]

    async def one(env: Any, task: str, seed: int) -> float:
        await env.areset(seed=seed, options={"task_id": task})
        while True:
            _, reward, terminated, truncated, _ = await env.astep(env.solver_action())
            if terminated or truncated:
                return float(reward)

    start = time.perf_counter()
    results = await asyncio.gather(*(one(e, t, i) for i, (e, t) in enumerate(zip(envs, tasks, strict=False))),
                                   return_exceptions=True)
    wall = time.perf_counter() - start
    for env in envs:
        env.close()
    errors = [f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)]
    return {"concurrent_episodes": n, "concurrent_errors": len(errors), "concurrent_error_examples": errors[:3],
            "concurrent_success": sum(r == 1.0 for r in results if not isinstance(r, BaseException)),
            "concurrent_wall_s": wall}


def browser_figures(quick: bool) -> dict[str, Any]:
    """Every Browser-v0 figure, or {"skipped": reason} when Playwright or Chromium is missing."""
    try:
        from agentgym.envs.browser.driver import shared_driver

        shared_driver()
    except Exception as exc:  # a bench reports what it could measure
        return {"skipped": f"{type(exc).__name__}: {exc}"}
    figures = context_and_steps(6 if quick else 30)
    figures.update(memory_per_episode(4 if quick else 8))
    figures.update(asyncio.run(_concurrent(16)))
    return figures
