"""Environment step throughput, side by side in one run.

    python bench/envs.py            # a table
    python bench/envs.py --json     # one JSON object, a key per env (below)
    python bench/envs.py --quick    # fewer steps, for a smoke run

Each env is driven by its built-in solver over its own tasks, one episode
after another in one thread, and timed around `reset` + `step` only (the
solver's action is computed outside the clock). Keys:

- ``maze_steps_per_s``: Maze-v0 (medium mazes), the in-memory baseline;
- ``sql_sqlite_steps_per_s`` / ``sql_postgres_steps_per_s``: SQL-v0 with one
  exploratory query then the submitted gold query, on SQLite and on the local
  PostgreSQL server (``--postgres-url``; ``null`` when it cannot be reached);
- ``tools_steps_per_s``: Tools-v0 with its Python tools;
- ``tools_mcp_steps_per_s``: Tools-v0 calling mcp-server-time over stdio
  (``null`` when the server is not installed);
- ``code_steps_per_s``: Code-v0 (write the reference, run the visible tests,
  submit to the grading sandbox) on Docker sandboxes;
- ``code_start_cold_ms_p50`` / ``code_start_warm_ms_p50`` / ``code_start_warm_ms_p90``:
  Code-v0 ``reset`` latency with no idle sandbox (a container is started) and
  from the warm pool (an idle, already reset sandbox); ``null`` without Docker;
- ``*_ratio_to_maze``: each figure over the maze's, measured in the same run;
- ``code_*`` container figures (with ``--code-container``): Code-v0 served from its own image vs on
  host-driven Docker sandboxes, image build cold and cached; see bench/envs_code_container.py.
- ``sre_*`` (with ``--sre``): SRE-v0's image build, task start cold and warm, steps/s and 32
  concurrent episodes (8 with ``--quick``); see bench/envs_sre.py.
- ``browser`` (with ``--browser``): Browser-v0 in headless Chromium (see bench/browser_figures.py):
  context start p50/p99, solver steps/s (and its ratio to the maze's), observation
  tokens (characters / 4) mean/p99 with and without pruning, Chromium memory (PSS)
  per open episode, and 16 concurrent solver episodes with their error count.

Figures only; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import agentgym  # noqa: E402


def steps_per_second(env: Any, steps: int, resets: list[float] | None = None) -> float:
    """Solver-driven steps per second of wall time spent inside reset/step (each reset's ms into `resets`)."""
    inner, tasks = env.unwrapped, list(env.unwrapped.task_ids())
    done_steps, spent, episode = 0, 0.0, 0
    while done_steps < steps:
        task = tasks[episode % len(tasks)]
        episode += 1
        start = time.perf_counter()
        env.reset(seed=episode, options={"task_id": task})
        spent += time.perf_counter() - start
        if resets is not None:
            resets.append((time.perf_counter() - start) * 1000)
        while True:
            action = inner.solver_action()
            start = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(action)
            spent += time.perf_counter() - start
            done_steps += 1
            if terminated or truncated:
                break
    return done_steps / spent


def measure(env_id: str, steps: int, **kwargs: Any) -> float | None:
    try:
        env = agentgym.make(env_id, **kwargs)
    except (agentgym.AgentGymError, ImportError) as exc:
        print(f"skipping {env_id} {kwargs}: {exc}", file=sys.stderr)
        return None
    try:
        steps_per_second(env, max(steps // 10, 5))  # warm-up: caches, connections, server start
        return steps_per_second(env, steps)
    except Exception as exc:  # a bench reports what it could measure
        print(f"skipping {env_id} {kwargs}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return None
    finally:
        env.close()


def code_start_latency(cold: int, warm: int) -> dict[str, float | None]:
    """Code-v0 reset latency in ms: cold (the pools closed first, so a container starts) and warm (from the pool)."""
    import statistics

    from agentgym.envs.code import pools

    try:
        env = agentgym.make("Code-v0")
    except (agentgym.AgentGymError, ImportError) as exc:
        print(f"skipping Code-v0 start latency: {exc}", file=sys.stderr)
        return {"code_start_cold_ms_p50": None, "code_start_warm_ms_p50": None, "code_start_warm_ms_p90": None}
    tasks, cold_ms, warm_ms = env.unwrapped.task_ids(), [], []
    try:
        for i in range(cold + warm):
            if i < cold:
                env.unwrapped._release_sandbox()
                pools.close_all()
            else:
                pool = pools.shared_pool(env.unwrapped._workspace_key, env.unwrapped.pool_size)
                deadline = time.monotonic() + 30
                while pool.idle == 0 and time.monotonic() < deadline:  # the released sandbox is being reset
                    time.sleep(0.005)
            start = time.perf_counter()
            env.reset(seed=i, options={"task_id": tasks[i % len(tasks)]})
            (cold_ms if i < cold else warm_ms).append((time.perf_counter() - start) * 1000)
            env.unwrapped._release_sandbox()
    except Exception as exc:  # a bench reports what it could measure
        print(f"skipping Code-v0 start latency: {type(exc).__name__}: {exc}", file=sys.stderr)
        return {"code_start_cold_ms_p50": None, "code_start_warm_ms_p50": None, "code_start_warm_ms_p90": None}
    finally:
        env.close()
    return {"code_start_cold_ms_p50": statistics.median(cold_ms), "code_start_warm_ms_p50": statistics.median(warm_ms),
            "code_start_warm_ms_p90": statistics.quantiles(warm_ms, n=10)[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="fewer steps (a smoke run)")
    parser.add_argument("--browser", action="store_true", help="add the Browser-v0 figures (headless Chromium)")
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--sre", action="store_true", help="also SRE-v0: image build, task start, concurrency")
    parser.add_argument("--code-container", action="store_true",
                        help="also Code-v0 from its own image vs host-driven Docker sandboxes")
    args = parser.parse_args()
    steps = 200 if args.quick else 2000
    results: dict[str, Any] = {
        "maze_steps_per_s": measure("Maze-v0", steps, difficulty="medium"),
        "sql_sqlite_steps_per_s": measure("SQL-v0", steps, solver_explores=True),
        "sql_postgres_steps_per_s": measure("SQL-v0", steps // 4, solver_explores=True, dialect="postgresql",
                                            url=args.postgres_url),
        "tools_steps_per_s": measure("Tools-v0", steps),
        "tools_mcp_steps_per_s": measure("Tools-v0", steps // 4, task_sets=["timezones"]),
        "code_steps_per_s": measure("Code-v0", steps // 20),
    }
    maze = results["maze_steps_per_s"]
    for key in [k for k in results if k != "maze_steps_per_s"]:
        value = results[key]
        results[key.replace("_steps_per_s", "_ratio_to_maze")] = value / maze if value and maze else None
    results.update(code_start_latency(cold=3 if args.quick else 10, warm=20 if args.quick else 100))
    results["steps_measured"] = steps
    if args.sre:
        from envs_sre import measure as measure_sre

        results.update(measure_sre(args.quick))
        sre = results.get("sre_steps_per_s")
        results["sre_ratio_to_maze"] = sre / maze if sre and maze else None
    if args.code_container:
        from envs_code_container import measure as measure_code_container

        results.update(measure_code_container(args.quick))
    if args.browser:
        from browser_figures import browser_figures

        browser = browser_figures(args.quick)
        if browser.get("steps_per_s") and maze:
            browser["steps_ratio_to_maze"] = browser["steps_per_s"] / maze
        results["browser"] = browser
    if args.json:
        print(json.dumps(results, indent=2))
        return
    table = Table(title=f"env steps/s (solver-driven, {steps} steps; Postgres and MCP {steps // 4})")
    for col in ("env", "steps/s", "vs Maze-v0"):
        table.add_column(col)
    for key, value in results.items():
        if key.endswith("_steps_per_s"):
            ratio = results.get(key.replace("_steps_per_s", "_ratio_to_maze"))
            table.add_row(key.removesuffix("_steps_per_s"), "n/a" if value is None else f"{value:,.0f}",
                          "1.00" if key.startswith("maze") else ("n/a" if ratio is None else f"{ratio:.3f}"))
    Console().print(table)
    latency = Table(title="Code-v0 episode start (reset) latency, ms")
    for col in ("cold p50", "warm-pool p50", "warm-pool p90"):
        latency.add_column(col)
    latency.add_row(*("n/a" if results[k] is None else f"{results[k]:.1f}" for k in
                      ("code_start_cold_ms_p50", "code_start_warm_ms_p50", "code_start_warm_ms_p90")))
    Console().print(latency)
    if args.sre:
        Console().print({k: v for k, v in results.items() if k.startswith("sre_")})
    if "browser" in results:
        browser = Table(title="Browser-v0 (headless Chromium, local sites, scripted solvers)")
        browser.add_column("figure")
        browser.add_column("value")
        for key, value in results["browser"].items():
            browser.add_row(key, f"{value:,.3f}" if isinstance(value, float) else str(value))
        Console().print(browser)


if __name__ == "__main__":
    main()
