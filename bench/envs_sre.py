"""SRE-v0's figures for bench/envs.py: image build, task start (cold and warm), steps/s, 32 concurrent episodes.

- ``sre_image_build_s``: a forced rebuild of the SRE image (fetching its .debs, `docker build` with
  no network), what a fresh machine pays once;
- ``sre_start_cold_p50_s``: `reset` on a brand-new container (container start, system start with the
  fault injected, the first health check), median;
- ``sre_start_warm_p50_s``: `reset` on a container the pool recycled in the background, median;
- ``sre_steps_per_s``: solver-driven steps (each one a tool call inside the container, health checks
  after mutations) per second of wall time inside `step`;
- ``sre_concurrent_*``: N episodes at once (one env per thread, different tasks, the solver playing):
  how many ended in an error, how many the solver repaired, and the wall time.
"""

from __future__ import annotations

import statistics
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import agentgym


def image_build_s() -> float:
    from agentgym.sandboxes import images

    images.ensure_base()
    start = time.perf_counter()
    images.build("sre", force=True)
    return time.perf_counter() - start


def _easy_tasks(env: Any) -> list[str]:
    return [t for t in env.unwrapped.task_ids() if t.startswith("easy/")]


def start_latencies(samples: int) -> dict[str, float]:
    """Median reset time on fresh containers and on recycled ones."""
    from agentgym.envs.sre import system

    env = agentgym.make("SRE-v0", max_systems=4)
    tasks, cold, warm = _easy_tasks(env), [], []
    try:
        env.reset(options={"task_id": tasks[0]})  # the image exists and the pool is made before timing
        for i in range(samples):
            env.unwrapped._release()
            system.close_pools()
            start = time.perf_counter()
            env.reset(options={"task_id": tasks[(7 * i) % len(tasks)]})
            cold.append(time.perf_counter() - start)
        for i in range(samples):
            env.unwrapped._release()
            pool = system.shared_pool(system.image_tag(), system.LIMITS, 4)
            deadline = time.monotonic() + 60
            while pool.idle < 1 and time.monotonic() < deadline:  # the background reset has finished
                time.sleep(0.05)
            start = time.perf_counter()
            env.reset(options={"task_id": tasks[(7 * i + 3) % len(tasks)]})
            warm.append(time.perf_counter() - start)
    finally:
        env.close()
    return {"sre_start_cold_p50_s": statistics.median(cold), "sre_start_warm_p50_s": statistics.median(warm)}


def steps_per_s(episodes: int) -> float:
    env = agentgym.make("SRE-v0")
    inner, tasks, steps, spent = env.unwrapped, _easy_tasks(env), 0, 0.0
    try:
        for i in range(episodes):
            env.reset(options={"task_id": tasks[(5 * i) % len(tasks)]})
            done = False
            while not done:
                action = inner.solver_action()
                start = time.perf_counter()
                _, _, terminated, truncated, _ = env.step(action)
                spent += time.perf_counter() - start
                steps += 1
                done = terminated or truncated
    finally:
        env.close()
    return steps / spent


def _episode(task_id: str) -> tuple[bool, str]:
    env = agentgym.make("SRE-v0")
    try:
        env.reset(options={"task_id": task_id})
        for _ in range(15):
            _, _, terminated, truncated, info = env.step(env.unwrapped.solver_action())
            if terminated or truncated:
                return bool(info.get("success")), ""
        return False, "the solver did not finish"
    except Exception as exc:  # counted and reported: the figure is "episodes with an error"
        return False, f"{type(exc).__name__}: {exc}"
    finally:
        env.close()


def concurrent(n: int) -> dict[str, Any]:
    """`n` episodes at once, each in its own env and container."""
    env = agentgym.make("SRE-v0")
    tasks = _easy_tasks(env)
    env.close()
    chosen = [tasks[(3 * i) % len(tasks)] for i in range(n)]
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=n) as workers:
        results = list(workers.map(_episode, chosen))
    errors = [why for _, why in results if why]
    return {f"sre_concurrent_{n}_errors": len(errors), f"sre_concurrent_{n}_solved": sum(ok for ok, _ in results),
            f"sre_concurrent_{n}_wall_s": time.perf_counter() - start,
            f"sre_concurrent_{n}_error_examples": errors[:3]}


def measure(quick: bool) -> dict[str, Any]:
    """Every SRE-v0 figure; None values when the Docker engine is missing."""
    from agentgym.sandboxes import docker

    if not docker.engine_available():
        return {"sre_skipped": "no Docker engine"}
    results: dict[str, Any] = {"sre_image_build_s": image_build_s()}
    results.update(start_latencies(3 if quick else 7))
    results["sre_warm_over_cold_start"] = results["sre_start_warm_p50_s"] / results["sre_start_cold_p50_s"]
    results["sre_steps_per_s"] = steps_per_s(3 if quick else 10)
    results.update(concurrent(8 if quick else 32))
    return results
