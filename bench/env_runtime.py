"""What running an env out of process costs, side by side in one run: in-process, worker process, env server on
loopback, container.

    python bench/env_runtime.py              # a table
    python bench/env_runtime.py --json       # one JSON object (keys below)
    python bench/env_runtime.py --quick      # fewer steps; --no-containers skips Docker

For Maze-v0 and SQL-v0 (SQLite), one env in one thread, timed around each
call: ``{env}.{runtime}.steps_per_s``, ``step_us_p50/p99``,
``reset_ms_p50/p99`` with runtime in ``inprocess``, ``process`` (a
`ProcessEnv`), ``server`` (``agentgym envs serve`` on 127.0.0.1, WebSocket)
and ``container`` (the agentgym/env image, unix socket). The actions cycle
through a fixed list, so every runtime does the same work.

- ``remote_overhead_us_p50``: Maze-v0's server step p50 minus its in-process
  step p50, in microseconds (the cost of the remote path per step);
- ``maze_server_steps_per_s``: Maze-v0 steps per second through one server
  process with ``--sessions`` client threads at once (the best of two runs),
  ``maze_server_thread_every_call_steps_per_s`` the same through a server
  started with ``--thread-every-call`` (no inline fast calls), alternated with
  it, and ``maze_server_inline_speedup`` their ratio; each with
  ``server_cpu_us_per_step``, the server process's CPU time per step;
- ``{env}.p99_doubles_at_sessions``: the concurrent sessions on one server at
  which the p99 step latency first reaches twice its one-session value (null:
  not within the sessions tried);
- ``cluster``: ``--cluster-sessions`` sessions over ``--replicas`` container
  replicas (EnvPool), each taking ``--cluster-steps`` steps: steps/s and errors.

Figures only; nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

import agentgym  # noqa: E402
from agentgym.runtime import ProcessEnv, RemoteEnv  # noqa: E402

SQL_ACTIONS = ['<tool_call>{"name": "execute_sql", "arguments": {"query": "SELECT COUNT(*) FROM customers"}}'
               '</tool_call>', '<tool_call>{"name": "execute_sql", "arguments": {"query": "SELECT 1"}}</tool_call>']
ENVS = {
    "maze": ("Maze-v0", "agentgym.envs.maze.env:MazeEnv", ["up", "left", "down", "right"], "easy-1"),
    "sql": ("SQL-v0", "agentgym.envs.sql.env:SqlEnv", SQL_ACTIONS, "shop-easy-0"),
}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def drive(env: Any, actions: list[str], task: str, steps: int, resets: int) -> dict[str, float]:
    """Time `resets` resets and `steps` steps (a reset whenever an episode ends)."""
    reset_s, step_s = [], []
    for i in range(resets):
        began = time.perf_counter()
        env.reset(seed=i, options={"task_id": task})
        reset_s.append(time.perf_counter() - began)
    for i in range(steps):
        began = time.perf_counter()
        _, _, terminated, truncated, _ = env.step(actions[i % len(actions)])
        step_s.append(time.perf_counter() - began)
        if terminated or truncated:
            env.reset(seed=i, options={"task_id": task})
    return {"steps_per_s": len(step_s) / sum(step_s), "step_us_p50": percentile(step_s, 0.5) * 1e6,
            "step_us_p99": percentile(step_s, 0.99) * 1e6, "reset_ms_p50": percentile(reset_s, 0.5) * 1e3,
            "reset_ms_p99": percentile(reset_s, 0.99) * 1e3}


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def concurrent(url: Any, actions: list[str], task: str, sessions: int, steps: int,
               server_pid: int | None = None) -> dict[str, Any]:
    """`sessions` client threads, each with its own session, `steps` steps each: aggregate steps/s, p99, errors
    (and, given the server's pid, its CPU time per step: a cost the machine's load barely moves)."""
    cpu_before = process_cpu_s(server_pid) if server_pid else 0.0
    latencies: list[float] = []
    errors: list[str] = []
    barrier = threading.Barrier(sessions)

    def client(k: int) -> None:
        try:
            env = RemoteEnv(url) if not callable(url) else url()
            env.reset(seed=k, options={"task_id": task})
            barrier.wait(timeout=300)
            mine = []
            for i in range(steps):
                began = time.perf_counter()
                _, _, terminated, truncated, _ = env.step(actions[(i + k) % len(actions)])
                mine.append(time.perf_counter() - began)
                if terminated or truncated:
                    env.reset(seed=i, options={"task_id": task})
            latencies.extend(mine)
            env.close()
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}"[:200])
            barrier.abort()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(sessions)]
    began = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    result = {"sessions": sessions, "steps_per_s": len(latencies) / wall if wall else 0.0,
              "step_us_p99": percentile(latencies, 0.99) * 1e6 if latencies else None, "errors": len(errors),
              "first_error": errors[0] if errors else None}
    if server_pid and latencies:
        result["server_cpu_us_per_step"] = (process_cpu_s(server_pid) - cpu_before) / len(latencies) * 1e6
    return result


def inline_vs_thread(server: Any, actions: list[str], task: str, sessions: int, steps: int) -> dict[str, Any]:
    """Maze through one server with `sessions` clients: fast calls inline (`server`, the default) and, side by side on
    a second server, every call in a worker thread (``--thread-every-call``, the old path); alternated twice."""
    from tests.runtime.servers import ServedEnv

    threaded = ServedEnv("Maze-v0", "--max-sessions", "128", "--thread-every-call").start()
    runs: dict[str, list[dict[str, Any]]] = {"inline": [], "thread": []}
    try:
        for _ in range(2):
            for name, served in (("inline", server), ("thread", threaded)):
                runs[name].append(concurrent(served.url, actions, task, sessions, steps, served.served.proc.pid))
    finally:
        threaded.stop()
    inline, thread = (max(r, key=lambda c: c["steps_per_s"]) for r in (runs["inline"], runs["thread"]))
    speedup = inline["steps_per_s"] / thread["steps_per_s"] if thread["steps_per_s"] else None
    return {"maze_server_steps_per_s": inline, "maze_server_thread_every_call_steps_per_s": thread,
            "maze_server_inline_speedup": speedup}


def doubling_point(url: str, actions: list[str], task: str, steps: int, levels: list[int]) -> dict[str, Any]:
    curve = [concurrent(url, actions, task, n, steps) for n in levels]
    base = curve[0]["step_us_p99"]
    at = next((c["sessions"] for c in curve[1:] if base and c["step_us_p99"] and c["step_us_p99"] >= 2 * base), None)
    return {"p99_doubles_at_sessions": at, "curve": curve}


def run(args: argparse.Namespace) -> dict[str, Any]:
    from tests.runtime.servers import ServedEnv  # the same helper the tests start servers with

    steps, resets = (300, 10) if args.quick else (args.steps, args.resets)
    levels = [1, 2, 4, 8] if args.quick else [1, 2, 4, 8, 16, 32]
    out: dict[str, Any] = {"steps": steps, "resets": resets}
    clusters: dict[str, Any] = {}
    for key, (env_id, entry, actions, task) in ENVS.items():
        figures: dict[str, Any] = {}
        local = agentgym.make(env_id)
        figures["inprocess"] = drive(local, actions, task, steps, resets)
        local.close()
        worker = ProcessEnv(entry, env_id=env_id)
        figures["process"] = drive(worker, actions, task, steps, resets)
        worker.close()
        server = ServedEnv(env_id, "--max-sessions", "128").start()
        try:
            remote = RemoteEnv(server.url)
            figures["server"] = drive(remote, actions, task, steps, resets)
            remote.close()
            figures.update(doubling_point(server.url, actions, task, max(50, steps // 4), levels))
            if key == "maze":
                out.update(inline_vs_thread(server, actions, task, args.sessions, steps))
        finally:
            server.stop()
        if args.containers:
            from agentgym.runtime.cluster import EnvCluster

            cluster = EnvCluster(env_id, replicas=1).start()
            clusters[key] = cluster
            remote = RemoteEnv(cluster.endpoints[0])
            figures["container"] = drive(remote, actions, task, steps, resets)
            remote.close()
            cluster.stop()
        out[key] = figures
    out["remote_overhead_us_p50"] = out["maze"]["server"]["step_us_p50"] - out["maze"]["inprocess"]["step_us_p50"]
    if args.containers:
        out["cluster"] = cluster_figures(args)
    return out


def cluster_figures(args: argparse.Namespace) -> dict[str, Any]:
    from agentgym.runtime.cluster import EnvCluster, EnvPool

    env_id, _, actions, task = ENVS["maze"]
    with EnvCluster(env_id, replicas=args.replicas, max_sessions=max(1, -(-args.cluster_sessions // args.replicas)))\
            as cluster:
        pool = EnvPool(cluster)
        result = concurrent(pool, actions, task, args.cluster_sessions, args.cluster_steps)
        result["replicas"] = args.replicas
        result["sessions_per_replica"] = sorted(pool.load(peak=True).values())  # the most open at once
        return result


def show(out: dict[str, Any]) -> None:
    table = Table(title="env runtime: one env, one thread")
    for col in ("env", "runtime", "steps/s", "step p50 us", "step p99 us", "reset p50 ms", "reset p99 ms"):
        table.add_column(col)
    for key in ENVS:
        for runtime in ("inprocess", "process", "server", "container"):
            if runtime in out[key]:
                f = out[key][runtime]
                table.add_row(key, runtime, f"{f['steps_per_s']:,.0f}", f"{f['step_us_p50']:,.0f}",
                              f"{f['step_us_p99']:,.0f}", f"{f['reset_ms_p50']:.2f}", f"{f['reset_ms_p99']:.2f}")
    console = Console()
    console.print(table)
    console.print(f"remote overhead per step (p50): {out['remote_overhead_us_p50']:,.0f} us")
    m = out["maze_server_steps_per_s"]
    t = out["maze_server_thread_every_call_steps_per_s"]
    console.print(f"Maze through one server, {m['sessions']} sessions: {m['steps_per_s']:,.0f} steps/s, "
                  f"{m['errors']} errors, server CPU {m['server_cpu_us_per_step']:,.0f} us/step (every call in a "
                  f"thread: {t['steps_per_s']:,.0f} steps/s, {t['server_cpu_us_per_step']:,.0f} us/step; "
                  f"x{out['maze_server_inline_speedup']:.2f})")
    for key in ENVS:
        console.print(f"{key}: p99 step latency doubles at {out[key]['p99_doubles_at_sessions']} sessions")
    if "cluster" in out:
        c = out["cluster"]
        console.print(f"cluster: {c['sessions']} sessions over {c['replicas']} replicas {c['sessions_per_replica']}: "
                      f"{c['steps_per_s']:,.0f} steps/s, {c['errors']} errors")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--quick", action="store_true", help="fewer steps")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--resets", type=int, default=50)
    parser.add_argument("--sessions", type=int, default=8, help="client threads for maze_server_steps_per_s")
    parser.add_argument("--no-containers", dest="containers", action="store_false")
    parser.add_argument("--replicas", type=int, default=4)
    parser.add_argument("--cluster-sessions", type=int, default=64)
    parser.add_argument("--cluster-steps", type=int, default=50)
    args = parser.parse_args()
    out = run(args)
    if args.json:
        print(json.dumps(out))
    else:
        show(out)


if __name__ == "__main__":
    main()
