"""Benchmark credit assignment: every estimator side by side on the same 100,000-turn batch.

    python bench/credit.py            # a table
    python bench/credit.py --json     # one JSON object

Batch: groups of 8 episodes (6 roots + 2 branches forked mid-way from the first root, so TRACE
has a tree), 2-14 turns each, state fingerprints from a 16-cell walk per group, 5% invalid
actions, sparse success reward. `<name>_ms` is `compute_advantages(name, episodes, ...)` end to
end (flat batch build, estimator, one list per episode); `<name>_core_ms` times the estimator on
a prebuilt `TurnBatch`; `batch_ms` is the shared one-pass build. Each figure is the median of
`--repeats` runs, estimators interleaved, the cyclic GC paused while timing (as `timeit` does). The learned models' update times per batch (tiny model,
CPU) are `spa_update_ms`, `oprl_update_ms`, and on a 24-turn batch read whole and windowed (every turn a
new context, as under `keep_turns: 0`) `spa_windowed_over_whole`, `oprl_windowed_over_whole` (at most about 1:
windowed rows are shorter); TRACE's allocator: `trace_observe_ms`, `trace_plan_ms`.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from agentgym import Episode, Turn
from agentgym.credit import ESTIMATORS, TraceAllocator, TurnBatch, compute_advantages, compute_credit


def synthetic_batch(n_turns: int = 100_000, group_size: int = 8, seed: int = 0) -> list[Episode]:
    """Episodes totalling exactly `n_turns` turns, in groups of `group_size` (see module docstring)."""
    rng = np.random.default_rng(seed)
    episodes: list[Episode] = []
    total, g = 0, 0
    while total < n_turns:
        roots: list[Episode] = []
        for i in range(group_size):
            n = int(min(rng.integers(2, 15), n_turns - total))
            if n <= 0:
                break
            branch = i >= group_size - 2 and roots and len(roots[0].turns) >= 2
            parent = roots[0] if branch else None
            bt = len(parent.turns) // 2 if parent else 0
            state = int(rng.integers(16))
            turns = []
            for t in range(n):
                state = (state + int(rng.integers(-1, 2))) % 16
                info = {"error_kind": "malformed_action"} if rng.random() < 0.05 else {}
                turns.append(Turn(index=bt + t, state_fingerprint=f"cell{state}", info=info,
                                  reward=float(t == n - 1 and rng.random() < 0.4)))
            ep = Episode(group_id=f"g{g}", task_id=f"task{g % 97}", turns=turns,
                         parent_id=parent.id if parent else None, branch_turn=bt if parent else None).finish()
            episodes.append(ep)
            if parent is None:
                roots.append(ep)
            total += n
        g += 1
    return episodes


def estimator_inputs(name: str, n_turns: int, rng: np.random.Generator) -> dict[str, Any]:
    """The learned/critic inputs an estimator needs, as flat [T] arrays."""
    return {"gae": {"values": rng.random(n_turns)},
            "spa": {"values": rng.random(n_turns), "contributions": rng.normal(0, 0.1, n_turns)},
            "oprl": {"step_rewards": rng.normal(0, 0.05, n_turns)}}.get(name, {})


def _ms(fn: Any) -> float:
    """Milliseconds of one call; like `timeit`, the cyclic GC is collected before and paused during it."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1000.0
    finally:
        gc.enable()


def time_estimators(episodes: list[Episode], repeats: int, progress: Progress) -> dict[str, float]:
    n_turns = sum(len(e.turns) for e in episodes)
    rng = np.random.default_rng(1)
    names = list(ESTIMATORS)
    inputs = {n: estimator_inputs(n, n_turns, rng) for n in names}
    samples: dict[str, list[float]] = {}
    task = progress.add_task("estimators", total=repeats)
    for _ in range(repeats):
        samples.setdefault("batch_ms", []).append(_ms(lambda: TurnBatch.from_episodes(episodes)))
        for name in names:
            kwargs = inputs[name]
            samples.setdefault(f"{name}_ms", []).append(
                _ms(lambda n=name, kw=kwargs: compute_advantages(n, episodes, **kw)))
            batch = TurnBatch.from_episodes(episodes)
            samples.setdefault(f"{name}_core_ms", []).append(
                _ms(lambda n=name, b=batch, kw=kwargs: compute_credit(n, b, **kw)))
        progress.advance(task)
    return {k: statistics.median(v) for k, v in samples.items()}


def time_trace_allocator(episodes: list[Episode]) -> dict[str, float]:
    tree = [e for e in episodes if e.group_id in {f"g{i}" for i in range(64)}]
    allocator = TraceAllocator(warmup=0)
    observe = _ms(lambda: allocator.observe(tree))
    plan = _ms(lambda: allocator.plan(tree, budget=128))
    return {"trace_observe_ms": observe, "trace_plan_ms": plan, "trace_tree_turns": sum(len(e.turns) for e in tree)}


def time_learned(repeats: int) -> dict[str, float | None]:
    """Update time per batch of SPA's progress estimator and OPRL's PRM on the tiny model (CPU): a short
    batch, and a long one (24 turns) read whole and then windowed as under `keep_turns: 0` (every turn a new
    context). Windowed rows are shorter, so `*_windowed_over_whole` should be at most about 1."""
    try:
        from agentgym.credit.learned import ImplicitPRM, ProgressEstimator, synthetic_token_episodes
        from agentgym.policy.models import TinyModelSpec, tiny_model_dir
    except ImportError:
        return {"spa_update_ms": None, "oprl_update_ms": None}
    path = tiny_model_dir(TinyModelSpec())
    spa = ProgressEstimator(path, lr=1e-4, warmup_steps=0, micro_batch_size=16)
    prm = ImplicitPRM(path, beta=0.05, lr=1e-4, micro_batch_size=16)

    def update_ms(batch: list[Episode]) -> tuple[float, float]:
        for ep, rows in zip(batch, prm.logprobs(batch), strict=True):  # the PRM starts as the old policy
            for turn, lp in zip(ep.turns, rows, strict=True):
                turn.action_logprobs = lp
        spa.update(batch), prm.update(batch)  # warm-up (allocations, lazy init)
        return (statistics.median(_ms(lambda: spa.update(batch)) for _ in range(repeats)),
                statistics.median(_ms(lambda: prm.update(batch)) for _ in range(repeats)))

    batch = synthetic_token_episodes(n_groups=2, group_size=4, n_turns=4, seed=0)
    spa_ms, prm_ms = update_ms(batch)
    whole = synthetic_token_episodes(n_groups=4, group_size=4, n_turns=24, prompt_len=60, seed=0)
    spa_whole, prm_whole = update_ms(whole)
    for ep in whole:
        for turn in ep.turns[1:]:
            turn.info["context"] = {"reset": True, "turns_dropped": turn.index}
    spa_windowed, prm_windowed = update_ms(whole)
    return {"spa_update_ms": spa_ms, "oprl_update_ms": prm_ms, "learned_batch_episodes": len(batch),
            "learned_batch_tokens": sum(len(t.prompt_ids) + len(t.action_ids) for e in batch for t in e.turns),
            "spa_long_whole_ms": spa_whole, "spa_long_windowed_ms": spa_windowed,
            "spa_windowed_over_whole": spa_windowed / spa_whole,
            "oprl_long_whole_ms": prm_whole, "oprl_long_windowed_ms": prm_windowed,
            "oprl_windowed_over_whole": prm_windowed / prm_whole}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--turns", type=int, default=100_000)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-learned", action="store_true", help="skip the tiny-model update timings")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    console = Console(stderr=True)
    episodes = synthetic_batch(args.turns, args.group_size)
    with Progress(console=console, transient=True) as progress:
        result: dict[str, Any] = {"turns": args.turns, "episodes": len(episodes), "group_size": args.group_size}
        result.update(time_estimators(episodes, args.repeats, progress))
    result["gigpo_over_grpo"] = result["gigpo_ms"] / result["grpo_ms"]
    result["gigpo_core_over_grpo_core"] = result["gigpo_core_ms"] / result["grpo_core_ms"]
    result.update(time_trace_allocator(episodes))
    if not args.no_learned:
        result.update(time_learned(max(2, args.repeats // 2)))
    if args.json:
        print(json.dumps(result))
        return
    table = Table(title=f"credit assignment on {args.turns} turns ({len(episodes)} episodes, groups of {args.group_size})")
    for col in ("estimator", "end to end ms", "core ms", "x grpo"):
        table.add_column(col, justify="right")
    for name in ESTIMATORS:
        table.add_row(name, f"{result[f'{name}_ms']:.1f}", f"{result[f'{name}_core_ms']:.1f}",
                      f"{result[f'{name}_ms'] / result['grpo_ms']:.2f}")
    Console().print(table)
    Console().print({k: v for k, v in result.items() if not k.endswith("_core_ms") and k not in
                     {f"{n}_ms" for n in ESTIMATORS}})


if __name__ == "__main__":
    main()
