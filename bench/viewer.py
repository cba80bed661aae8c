"""Page-load times of the trajectory viewer on a store of 100,000 episodes.

    python bench/viewer.py                      # 100,000 episodes, prints a table
    python bench/viewer.py --json               # list_p50_ms, list_p99_ms, episode_p50_ms, episode_p99_ms, ...
    python bench/viewer.py --episodes 20000 --requests 40

Builds a SQLite store with a fast bulk insert (SQLAlchemy Core executemany into the
store's own tables, in one transaction per batch), serves the real viewer on a
loopback port, and times full HTTP page loads (request to last byte) of the
episode list (first page, deep pages, filtered and sorted listings) and of the
episode page (conversation and token view) at random. A small store (1,000
episodes) is measured the same way in the same run, so the ratio says how much
the list slows down with 100x the episodes.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from rich.console import Console  # noqa: E402
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from agentgym.store import TrajectoryStore, episodes_table, turns_table  # noqa: E402
from agentgym.viewer.server import BackgroundViewer  # noqa: E402

ENVS = ("Maze-v0", "SQL-v0")
STATUSES = ("complete", "complete", "complete", "truncated", "error")
MOVES = ("up", "down", "left", "right")


def episode_rows(rng: random.Random, start: int, count: int) -> tuple[list[dict], list[dict]]:
    """`count` synthetic episodes (ids start..start+count) and their turns, with tokens, as table rows."""
    episodes, turns = [], []
    now = time.time()
    for n in range(start, start + count):
        env = ENVS[n % 2]
        task = f"task-{(n // 8) % 1000}"
        num_turns = rng.randint(2, 6)
        status = rng.choice(STATUSES)
        reward = 1.0 if status == "complete" and rng.random() < 0.5 else 0.0
        eid = f"{n:032x}"
        episodes.append({
            "id": eid, "run_id": f"run-{n % 5}", "env_id": env, "task_id": task, "seed": n,
            "group_id": f"run-{n % 5}:{env}:{task}:{n // 8}", "parent_id": None, "branch_turn": None,
            "status": status, "failure": "infra" if status == "error" else None,
            "error": "sandbox died" if status == "error" else None, "total_reward": reward,
            "num_turns": num_turns, "policy_version": n // 2000, "created_at": now + n * 1e-3, "metadata": {}})
        for i in range(num_turns):
            ids = [rng.randrange(500) for _ in range(rng.randint(4, 12))]
            turns.append({
                "episode_id": eid, "index": i, "observation": f"Moved. Goal: {i} up. Open: up, left.",
                "action_text": rng.choice(MOVES), "reward": reward if i == num_turns - 1 else 0.0,
                "terminated": i == num_turns - 1 and status == "complete", "truncated": False,
                "state_fingerprint": f"{task}@{rng.randrange(6)},{rng.randrange(6)}", "finish_reason": "stop",
                "advantage": round(rng.uniform(-1, 1), 3), "prompt_ids": [], "action_ids": ids,
                "action_logprobs": [round(-rng.random() * 3, 3) for _ in ids], "token_versions": [n // 2000] * len(ids),
                "info": {"turn": i + 1}, "timings": {"generate_s": 0.01, "env_s": 0.001}, "loss_mask": [1] * len(ids)})
    return episodes, turns


def build_store(path: Path, count: int, seed: int = 0, batch: int = 5000) -> tuple[TrajectoryStore, float]:
    """A store of `count` synthetic episodes; returns it and the seconds the bulk insert took."""
    store = TrajectoryStore(path)
    rng = random.Random(seed)
    started = time.perf_counter()
    with Progress(transient=True) as bar:
        job = bar.add_task(f"inserting {count:,} episodes", total=count)
        for start in range(0, count, batch):
            episodes, turns = episode_rows(rng, start, min(batch, count - start))
            with store.engine.begin() as conn:
                conn.execute(episodes_table.insert(), episodes)
                conn.execute(turns_table.insert(), turns)
            bar.update(job, advance=len(episodes))
    return store, time.perf_counter() - started


def list_urls(rng: random.Random, count: int, n: int) -> list[str]:
    pages = max(1, count // 50)
    shapes = [
        lambda: "/episodes",
        lambda: f"/episodes?page={rng.randint(1, pages)}",
        lambda: f"/episodes?env={rng.choice(ENVS)}&status=complete&page={rng.randint(1, 20)}",
        lambda: f"/episodes?sort=total_reward&order=desc&page={rng.randint(1, 20)}",
        lambda: f"/episodes?run=run-{rng.randrange(5)}&min_reward=0.5",
        lambda: f"/episodes?version={rng.randrange(max(1, count // 2000))}&failure=infra",
    ]
    return [rng.choice(shapes)() for _ in range(n)]


def episode_urls(rng: random.Random, count: int, n: int) -> list[str]:
    return [f"/episodes/{rng.randrange(count):032x}" + ("?view=tokens" if i % 2 else "") for i in range(n)]


def timed(base: str, paths: list[str]) -> list[float]:
    """Milliseconds per full page load."""
    out = []
    for path in paths:
        started = time.perf_counter()
        with urllib.request.urlopen(base + path, timeout=120) as resp:
            resp.read()
            if resp.status != 200:
                raise RuntimeError(f"{path} answered HTTP {resp.status}")
        out.append((time.perf_counter() - started) * 1000)
    return out


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def measure(store: TrajectoryStore, count: int, requests: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    with BackgroundViewer(store) as viewer:
        timed(viewer.url, ["/episodes", f"/episodes/{0:032x}"])  # warm up: templates, connection pool
        lists = timed(viewer.url, list_urls(rng, count, requests))
        pages = timed(viewer.url, episode_urls(rng, count, requests))
    return {"list_p50_ms": statistics.median(lists), "list_p99_ms": percentile(lists, 99),
            "episode_p50_ms": statistics.median(pages), "episode_p99_ms": percentile(pages, 99)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100_000, help="episodes in the big store")
    parser.add_argument("--small", type=int, default=1_000, help="episodes in the small store compared with it")
    parser.add_argument("--requests", type=int, default=60, help="timed page loads per page kind")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    console = Console(stderr=True)
    with tempfile.TemporaryDirectory() as tmp:
        big, build_s = build_store(Path(tmp) / "big.db", args.episodes, args.seed)
        small, _ = build_store(Path(tmp) / "small.db", args.small, args.seed + 1)
        result = measure(big, args.episodes, args.requests, args.seed)
        baseline = measure(small, args.small, args.requests, args.seed)
        big.close()
        small.close()
    result.update({
        "episodes": args.episodes, "requests_per_kind": args.requests, "build_s": round(build_s, 1),
        "build_episodes_per_s": round(args.episodes / build_s),
        "small_store_episodes": args.small, "small_list_p50_ms": baseline["list_p50_ms"],
        "small_episode_p50_ms": baseline["episode_p50_ms"],
        "list_p50_ratio_big_vs_small": result["list_p50_ms"] / baseline["list_p50_ms"],
        "episode_p50_ratio_big_vs_small": result["episode_p50_ms"] / baseline["episode_p50_ms"],
    })
    result = {k: round(v, 2) if isinstance(v, float) else v for k, v in result.items()}
    if args.json:
        print(json.dumps(result))
        return
    table = Table(title=f"viewer page loads, {args.episodes:,} vs {args.small:,} episodes ({args.requests} each)")
    for col in ("page", "p50 ms", "p99 ms", f"p50 ms at {args.small:,}", "ratio"):
        table.add_column(col, justify="right")
    table.add_row("episode list", f"{result['list_p50_ms']:.1f}", f"{result['list_p99_ms']:.1f}",
                  f"{result['small_list_p50_ms']:.1f}", f"{result['list_p50_ratio_big_vs_small']:.2f}x")
    table.add_row("episode page", f"{result['episode_p50_ms']:.1f}", f"{result['episode_p99_ms']:.1f}",
                  f"{result['small_episode_p50_ms']:.1f}", f"{result['episode_p50_ratio_big_vs_small']:.2f}x")
    console.print(table)
    console.print(f"bulk insert: {args.episodes:,} episodes in {build_s:.1f}s")


if __name__ == "__main__":
    main()
