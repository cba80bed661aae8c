"""Eval benchmark: episodes/s of `agentgym eval` in-process and through `agentgym serve`, and what windowing costs.

    python bench/eval.py            # a table
    python bench/eval.py --json     # one JSON object

Measured side by side in one run with the tiny local model on Maze-v0 (open
room), the same tasks, seeds and sampling everywhere (ratios, not absolute claims):

(a) in-process: `hf:MODEL_DIR`, the eval runner through the collector;
(b) served: `agentgym serve MODEL_DIR` in a subprocess and `openai:URL` (exact ids over HTTP);
    `served_vs_inprocess` = (b) episodes/s / (a) episodes/s;
(c) windowing: the in-process eval again with a context window keeping the task and the
    last turn (`keep_turns=1`), long enough episodes that most turns are windowed;
    seconds and prompt tokens read per turn against the unwindowed run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentgym.eval import EnvEntry, EvalPlan, resolve_env, run_eval  # noqa: E402
from agentgym.eval.metrics import token_counts  # noqa: E402
from agentgym.launch import serve_model  # noqa: E402
from agentgym.policy.loading import PolicyOptions, open_policy  # noqa: E402
from agentgym.policy.models import tiny_model_dir  # noqa: E402
from agentgym.store import TrajectoryStore  # noqa: E402


async def timed_eval(policy: str, tasks: int, k: int, turns: int, context: dict, store: TrajectoryStore,
                     run: str) -> dict:
    """One eval; episodes/s, turns and per-turn figures."""
    options = PolicyOptions(temperature=1.0, max_new_tokens=6, seed=0)
    opened = await open_policy(policy, options)
    try:
        env = resolve_env(EnvEntry("Maze-v0", {"difficulty": "open"}, max_turns=turns), str(tasks), None, None)
        plan = EvalPlan(policy=policy, k=k, envs=[env], context=context)
        started = time.perf_counter()
        result = await run_eval(plan, opened, store, run, concurrency=8, progress=False)
        seconds = time.perf_counter() - started
    finally:
        await opened.aclose()
    episodes = store.episodes(run_id=run)
    n_turns = sum(e.num_turns for e in episodes)
    read = sum(token_counts(e)[0] for e in episodes)
    summary = result.summaries[0]
    return {"episodes": len(episodes), "turns": n_turns, "seconds": seconds, "episodes_per_s": len(episodes) / seconds,
            "seconds_per_turn": seconds / max(1, n_turns), "prompt_tokens_per_turn": read / max(1, n_turns),
            "windowed_turns": summary.windowed_turns, "dropped_tokens": summary.dropped_tokens}


def measure(tasks: int, k: int) -> dict:
    model = tiny_model_dir()
    with tempfile.TemporaryDirectory() as tmp:
        store = TrajectoryStore(str(Path(tmp) / "bench.db"))
        local = asyncio.run(timed_eval(f"hf:{model}", tasks, k, 8, {}, store, "local"))
        windowed = asyncio.run(timed_eval(f"hf:{model}", tasks, k, 8, {"keep_turns": 1}, store, "windowed"))
        with serve_model(model, timeout_s=180) as server:
            served = asyncio.run(timed_eval(f"openai:{server.url}/v1", tasks, k, 8, {}, store, "served"))
    return {
        "setup": {"env": "Maze-v0 (open)", "model": "tiny (built locally)", "tasks": tasks, "k": k, "max_turns": 8,
                  "max_new_tokens": 6, "concurrency": 8},
        "in_process": local, "served": served, "windowed_keep_turns_1": windowed,
        "served_vs_inprocess": served["episodes_per_s"] / local["episodes_per_s"],
        "windowing_seconds_per_turn_ratio": windowed["seconds_per_turn"] / local["seconds_per_turn"],
        "windowing_prompt_tokens_per_turn_ratio": windowed["prompt_tokens_per_turn"] / local["prompt_tokens_per_turn"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--tasks", type=int, default=8)
    parser.add_argument("-k", type=int, default=2)
    args = parser.parse_args()
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    result = measure(args.tasks, args.k)
    if args.json:
        print(json.dumps(result))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"bench/eval.py: {result['setup']}")
    for col in ("run", "episodes", "turns", "episodes/s", "s/turn", "prompt tok/turn", "windowed turns"):
        table.add_column(col)
    for name in ("in_process", "served", "windowed_keep_turns_1"):
        r = result[name]
        table.add_row(name, str(r["episodes"]), str(r["turns"]), f"{r['episodes_per_s']:.2f}",
                      f"{r['seconds_per_turn']:.3f}", f"{r['prompt_tokens_per_turn']:.0f}", str(r["windowed_turns"]))
    Console().print(table)
    print(f"served / in-process episodes/s: {result['served_vs_inprocess']:.2f}x; windowing: "
          f"{result['windowing_seconds_per_turn_ratio']:.2f}x seconds per turn, "
          f"{result['windowing_prompt_tokens_per_turn_ratio']:.2f}x prompt tokens per turn")


if __name__ == "__main__":
    main()
