"""Progress-estimator probe: can SPA's estimator learn a recipe's outcomes from its warm-started policy's rollouts?

    python bench/progress_fit.py configs/spa.yaml                               # the recipe's estimator settings
    python bench/progress_fit.py configs/spa.yaml --heads hidden:1e-3,logits:3e-5 --steps 45
    python bench/progress_fit.py configs/spa.yaml --set env=KeyDoor-v0 --json

Builds the recipe's model, runs its SFT warm start, then collects two batches with the warm-started policy
(the recipe's groups_per_batch x group_size each, on disjoint training tasks, sampled at the recipe's
temperature): A to fit on, B held out. For each `--heads` entry (features:lr) a fresh `ProgressEstimator`
(a copy of the warm-started policy, SPA's objective `mean (R - sum_t c_t)^2`) takes `--steps` full-batch
steps on A; every `--every` steps the probe prints the share of the outcomes' variance the contributions'
sums explain on A and on B (1 - MSE / var(R); 0 is what predicting the mean gives, below 0 is worse).
This is what SPA's first updates get from the estimator, in minutes rather than a training run.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentgym.config import load_train_config  # noqa: E402
from bench.learning import parse_sets  # noqa: E402
from bench.warm_start import play_episodes, warm_started  # noqa: E402


def explained(estimator, episodes) -> float:
    """1 - MSE(R, sum_t c_t) / var(R) over `episodes` (0.0 when every outcome is the same)."""
    from agentgym.credit.learned.progress import explained_variance

    outcomes = [e.total_reward for e in episodes]
    sums = [sum(c) for c in estimator.predict(episodes)]
    return explained_variance(sum((r - s) ** 2 for r, s in zip(outcomes, sums, strict=True)) / len(outcomes), outcomes)


def fit(side, fit_on, held_out, *, features: str, lr: float, steps: int, every: int, params: dict) -> dict:
    """A fresh estimator on a copy of the warm-started policy, `steps` steps on `fit_on`."""
    from agentgym.credit.learned import ProgressEstimator

    keep = {k: v for k, v in params.items() if k in ("weight_decay", "warmup_steps", "grad_clip", "micro_batch_size")}
    estimator = ProgressEstimator(copy.deepcopy(side.model), **{**keep, "lr": lr, "features": features})
    started, curve = time.perf_counter(), []
    for step in range(1, steps + 1):
        stats = estimator.update(fit_on, steps=1)
        if step % every == 0 or step == steps:
            curve.append({"step": step, "loss": round(stats.loss, 4), "ev_fit": round(explained(estimator, fit_on), 3),
                          "ev_held_out": round(explained(estimator, held_out), 3)})
    return {"features": features, "lr": lr, "s_per_step": round((time.perf_counter() - started) / steps, 2),
            "curve": curve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", help="a training config (configs/NAME.yaml)")
    parser.add_argument("--heads", default=None,
                        help="features:lr entries, comma-separated (default: the recipe's credit_model_params)")
    parser.add_argument("--steps", type=int, default=45, help="full-batch steps per head")
    parser.add_argument("--every", type=int, default=3, help="evaluate every N steps")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    cfg = load_train_config(args.recipe, {"output_dir": "/tmp/agentgym-progress-fit", **parse_sets(parser, args.set)})
    params = dict(cfg.credit_model_params)
    heads = args.heads or f"{params.get('features', 'hidden')}:{params.get('lr', 3e-6)}"
    try:
        specs = [(f, float(lr)) for f, lr in (h.split(":") for h in heads.split(","))]
    except ValueError:
        parser.error(f"--heads takes features:lr entries such as hidden:1e-3,logits:3e-5; got {heads!r}")
    if args.steps < 1 or args.every < 1:
        parser.error("--steps and --every must be at least 1")
    cfg, side, backend, train, _ = warm_started(cfg)
    per = cfg.groups_per_batch
    batches = [play_episodes(cfg, side, backend, [t for t in train[k * per:(k + 1) * per] for _ in range(cfg.group_size)],
                             cfg.temperature) for k in (0, 1)]
    rows = [fit(side, batches[0], batches[1], features=f, lr=lr, steps=args.steps, every=args.every, params=params)
            for f, lr in specs]
    outcomes = [[e.total_reward for e in b] for b in batches]
    summary = {"recipe": args.recipe, "env": cfg.env, "episodes": [len(b) for b in batches],
               "outcome_mean": [round(sum(o) / len(o), 3) for o in outcomes], "heads": rows}
    if args.json:
        print(json.dumps(summary))
        return
    print(f"{cfg.env}: fit on {len(batches[0])} episodes (mean outcome {summary['outcome_mean'][0]}), "
          f"held out {len(batches[1])} ({summary['outcome_mean'][1]})")
    for r in rows:
        points = ", ".join(f"{p['step']}: {p['ev_fit']:+.2f}/{p['ev_held_out']:+.2f}" for p in r["curve"])
        print(f"{r['features']} lr {r['lr']:g} ({r['s_per_step']} s/step), explained variance fit/held-out "
              f"by step: {points}")


if __name__ == "__main__":
    main()
