"""Store write throughput: 10,000 episodes of 10 turns into SQLite and PostgreSQL, side by side.

    .venv/bin/python bench/store.py            # a table
    .venv/bin/python bench/store.py --json     # {"sqlite_episodes_per_s": ..., "postgres_episodes_per_s": ...}

PostgreSQL: a scratch database is created on the server named by --postgres
(default: the local server) and dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

import sqlalchemy as sa
from rich.console import Console
from rich.table import Table

from agentgym import Episode, TrajectoryStore, Turn


def synthetic_episodes(count: int, turns: int) -> list[Episode]:
    """Episodes shaped like real ones: text, 40 prompt and 16 action tokens per turn, info and timings."""
    return [
        Episode(
            run_id="bench", env_id="Maze-v0", task_id=f"easy-{i % 500}", seed=i, group_id=f"g{i // 8}",
            policy_version=i // 1000,
            turns=[Turn(index=t, observation=f"Moved up. Goal: {t} down, 2 right. Open: up, down.",
                        action_text="right", prompt_ids=list(range(40)), action_ids=list(range(16)),
                        action_logprobs=[-0.1] * 16, token_versions=[i // 1000] * 16, reward=float(t == turns - 1),
                        terminated=t == turns - 1, info={"turn": t, "move": "right"},
                        state_fingerprint=f"easy-{i % 500}@{t},2", timings={"generate_s": 0.01, "env_s": 0.001})
                   for t in range(turns)],
        ).finish()
        for i in range(count)
    ]


def time_writes(url: str, episodes: list[Episode], batch: int) -> float:
    store = TrajectoryStore(url)
    start = time.perf_counter()
    for i in range(0, len(episodes), batch):
        store.put_many(episodes[i : i + batch])
    elapsed = time.perf_counter() - start
    assert store.count() == len(episodes)
    store.close()
    return len(episodes) / elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--batch", type=int, default=100, help="episodes per put_many transaction")
    parser.add_argument("--postgres", default="postgresql+psycopg://postgres@127.0.0.1:5432/test")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    episodes = synthetic_episodes(args.episodes, args.turns)
    results: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        results["sqlite_episodes_per_s"] = time_writes(str(Path(tmp) / "bench.db"), episodes, args.batch)
    name = f"agentgym_bench_{uuid.uuid4().hex[:8]}"
    admin = sa.create_engine(args.postgres, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    try:
        url = sa.engine.make_url(args.postgres).set(database=name).render_as_string(hide_password=False)
        results["postgres_episodes_per_s"] = time_writes(url, episodes, args.batch)
    finally:
        with admin.connect() as conn:
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    results["postgres_over_sqlite"] = results["postgres_episodes_per_s"] / results["sqlite_episodes_per_s"]
    results.update(episodes=args.episodes, turns_per_episode=args.turns, batch=args.batch)
    if args.json:
        print(json.dumps(results))
        return 0
    table = Table(title=f"store writes: {args.episodes} episodes x {args.turns} turns, {args.batch} per transaction")
    table.add_column("backend")
    table.add_column("episodes/s", justify="right")
    table.add_column("turns/s", justify="right")
    for key in ("sqlite", "postgres"):
        rate = results[f"{key}_episodes_per_s"]
        table.add_row(key, f"{rate:,.0f}", f"{rate * args.turns:,.0f}")
    Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
