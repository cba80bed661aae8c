"""Learning benchmark: credit-assignment estimators with equal rollout budgets on the quickstart env.

    python bench/learning.py                                   # grpo and gigpo, 3 seeds, a rich table
    python bench/learning.py --estimators grpo,gigpo,spa,oprl,trace --json
    python bench/learning.py --updates 4 --seeds 1 --json      # toy scale (smoke test)

Every run is the real training loop (`trainer.train.train`) on configs/quickstart.yaml
with only `estimator` (and the seed) changed, except that dynamic sampling is off
(`drop_zero_variance: false`) so that every update spends exactly the same rollout
budget (groups_per_batch x group_size episodes) whatever the estimator. No
estimator's own hyperparameters are tuned: each runs with its docs/algorithms.md
defaults (and the recipe's credit-model settings for spa / oprl).

Measured per run: updates until the success rate of the rollouts (3-update moving
average) first reaches `--threshold`, and the final success (mean of the last 5
updates). Reported per estimator: mean and spread (min-max) over seeds; a run that
never reaches the threshold counts as `--updates` and is flagged.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from agentgym.config import load_train_config  # noqa: E402

#: per-estimator settings that are part of the estimator, not tuning (critic / learned-model plumbing)
ESTIMATOR_SETTINGS: dict[str, dict[str, object]] = {
    "gae": {"critic_warmup_updates": 2},
    "spa": {"credit_model_params": {"lr": 0.0003, "warmup_steps": 5, "micro_batch_size": 16}},
    "oprl": {"credit_model_params": {"lr": 0.0001, "beta": 0.05, "micro_batch_size": 16}},
}


@dataclass
class RunOutcome:
    estimator: str
    seed: int
    updates_to_threshold: int | None
    final_success: float
    successes: list[float]
    seconds: float


def moving_average(values: list[float], window: int = 3) -> list[float]:
    return [statistics.fmean(values[max(0, i - window + 1):i + 1]) for i in range(len(values))]


def run_one(estimator: str, seed: int, args: argparse.Namespace, out: Path, console: Console) -> RunOutcome:
    from agentgym.trainer.train import train

    overrides = {"name": f"{estimator}-s{seed}", "output_dir": str(out), "seed": seed, "estimator": estimator,
                 "updates": args.updates, "drop_zero_variance": False, "eval_tasks": 0, "eval_every": 0,
                 "checkpoint_every": 0, "tensorboard": False, "plot": False, "time_limit_s": None,
                 **ESTIMATOR_SETTINGS.get(estimator, {})}
    cfg = load_train_config(args.config, overrides)
    started = time.perf_counter()
    result = train(cfg, console=console)
    successes = [r["success_rate"] for r in result.rows]
    smooth = moving_average(successes)
    reached = next((i + 1 for i, s in enumerate(smooth) if s >= args.threshold), None)
    final = statistics.fmean(successes[-5:]) if successes else float("nan")
    return RunOutcome(estimator, seed, reached, final, successes, time.perf_counter() - started)


def summarise(outcomes: list[RunOutcome], updates: int) -> dict[str, dict[str, float]]:
    by: dict[str, list[RunOutcome]] = {}
    for o in outcomes:
        by.setdefault(o.estimator, []).append(o)
    summary = {}
    for name, runs in by.items():
        to_thr = [o.updates_to_threshold if o.updates_to_threshold is not None else updates for o in runs]
        finals = [o.final_success for o in runs]
        summary[name] = {
            "updates_to_threshold": statistics.fmean(to_thr), "updates_min": min(to_thr), "updates_max": max(to_thr),
            "reached": sum(o.updates_to_threshold is not None for o in runs), "runs": len(runs),
            "final_success": statistics.fmean(finals), "final_min": min(finals), "final_max": max(finals),
            "seconds_per_run": statistics.fmean(o.seconds for o in runs)}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--estimators", default="grpo,gigpo")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--updates", type=int, default=30, help="updates per run (the equal rollout budget)")
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    console = Console(stderr=args.json)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="agentgym-learning-") as tmp:
        for name in args.estimators.split(","):
            for seed in range(args.seeds):
                console.print(f"[bold]{name}[/] seed {seed}: {args.updates} updates ...")
                o = run_one(name.strip(), seed, args, Path(tmp), console)
                outcomes.append(o)
                console.print(f"  reached {args.threshold} at update {o.updates_to_threshold}, "
                              f"final success {o.final_success:.2f} ({o.seconds:.0f} s)")
    summary = summarise(outcomes, args.updates)
    if args.json:
        flat: dict[str, object] = {"threshold": args.threshold, "updates": args.updates, "seeds": args.seeds}
        for name, s in summary.items():
            flat[f"{name}_updates_to_threshold"] = round(s["updates_to_threshold"], 2)
            flat[f"{name}_final_success"] = round(s["final_success"], 4)
            flat[f"{name}_updates_to_threshold_range"] = [s["updates_min"], s["updates_max"]]
            flat[f"{name}_final_success_range"] = [round(s["final_min"], 4), round(s["final_max"], 4)]
            flat[f"{name}_runs_reaching_threshold"] = f"{s['reached']}/{s['runs']}"
        print(json.dumps(flat))
        return
    table = Table(title=f"equal rollout budgets: {args.updates} updates x 128 episodes, {args.seeds} seeds")
    for col in ("estimator", f"updates to {args.threshold}", "(min-max)", "reached", "final success",
                "(min-max)", "s/run"):
        table.add_column(col, justify="right")
    for name, s in summary.items():
        table.add_row(name, f"{s['updates_to_threshold']:.1f}", f"{s['updates_min']}-{s['updates_max']}",
                      f"{s['reached']}/{s['runs']}", f"{s['final_success']:.2f}",
                      f"{s['final_min']:.2f}-{s['final_max']:.2f}", f"{s['seconds_per_run']:.0f}")
    console.print(table)


if __name__ == "__main__":
    main()
