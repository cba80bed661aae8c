"""The trainer's GPU paths, side by side in one run: fp32 against bf16, single against fsdp2, and a real training run.

    python bench/gpu.py --json                      # on a CUDA machine
    python bench/gpu.py --device cpu --hidden 64 --layers 2 --train-updates 2   # a dry run of the same steps on CPU

- update tokens/s of the same seeded synthetic batch (`bench/trainer_ranks.py`: a workload, not rollouts) for
  `single` in float32, `single` in bfloat16 and `fsdp2` at one rank in bfloat16 (torchrun, nccl on a GPU), each
  with its ratio to float32 single and the peak device memory it took;
- the quickstart recipe (`configs/quickstart.yaml`: SFT warm start, then GRPO on Maze-v0 with held-out evals)
  for `--train-updates` updates on the device in bfloat16: the wall time, updates per minute and held-out
  success at start and end, read from the run's metrics.jsonl.

The figures are the device's; CI has no GPU and runs the same code on CPU (tests/trainer). `--json` prints
exactly one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def update_run(name: str, strategy: str, dtype: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    out = workdir / f"{name}.json"
    worker = [str(ROOT / "bench" / "trainer_ranks.py"), "--strategy", strategy, "--updates", str(args.updates),
              "--groups", str(args.groups), "--turns", str(args.turns), "--hidden", str(args.hidden),
              "--layers", str(args.layers), "--out", str(out), "--set", f"device={args.device}",
              "--set", f"dtype={dtype}", "--set", f"micro_batch_tokens={args.micro_batch_tokens}"]
    if strategy == "single":
        cmd = [sys.executable, *worker]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=1", "--master-addr=127.0.0.1",
               "--master-port=29511", *worker]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s, env=os.environ.copy())
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    return json.loads(out.read_text())


def train_run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    run_dir = workdir / "quickstart"
    sets = {"updates": args.train_updates, "device": args.device,
            "dtype": "bfloat16" if args.device == "cuda" else "float32",
            "eval_every": max(1, args.train_updates // 2), "time_limit_s": args.timeout_s,
            "output_dir": str(workdir)}
    cmd = [sys.executable, "-m", "agentgym", "train", str(ROOT / "configs" / "quickstart.yaml")]
    for key, value in sets.items():
        cmd += ["--set", f"{key}={value}"]
    started = time.perf_counter()
    # cwd outside the checkout: `-m agentgym` then imports the installed package, not the folder here
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout_s + 120, env=os.environ.copy(),
                          cwd=workdir)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        return {"error": (done.stdout + done.stderr)[-3000:], "seconds": seconds}
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    trained = [r for r in rows if "success_rate" in r]
    return {"seconds": seconds, "updates": len(trained), "updates_per_min": 60 * len(trained) / seconds,
            "train_success": [round(r["success_rate"], 3) for r in trained],
            "eval_success": {int(r["update"]): r["eval_success_rate"] for r in rows if "eval_success_rate" in r},
            "final_elapsed_s": rows[-1].get("elapsed_s") if rows else None}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--updates", type=int, default=5)
    ap.add_argument("--groups", type=int, default=16)
    ap.add_argument("--turns", type=int, default=6)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--micro-batch-tokens", type=int, default=4096)
    ap.add_argument("--train-updates", type=int, default=10, help="0: skip the training run")
    ap.add_argument("--timeout-s", type=int, default=300, help="each step's limit")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    result: dict[str, Any] = {"device": args.device, "model": {"hidden": args.hidden, "layers": args.layers}}
    if args.device == "cuda":
        import torch

        result["gpu"] = torch.cuda.get_device_name(0)
        result["torch"] = torch.__version__
    with tempfile.TemporaryDirectory() as tmp:
        runs = {"single-fp32": ("single", "float32"), "single-bf16": ("single", "bfloat16"),
                "fsdp2x1-bf16": ("fsdp2", "bfloat16")}
        rows = {k: update_run(k, s, d, args, Path(tmp)) for k, (s, d) in runs.items()}
        base = rows["single-fp32"].get("tokens_per_s")
        for row in rows.values():
            if base and "tokens_per_s" in row:
                row["vs_single_fp32"] = row["tokens_per_s"] / base
        result["update"] = rows
        if args.train_updates:
            result["train"] = train_run(args, Path(tmp))
    if args.json:
        print(json.dumps(result))
        return
    print(f"update tokens/s on {result.get('gpu', args.device)}, model hidden {args.hidden} x {args.layers} layers")
    for key, row in result["update"].items():
        if "error" in row:
            print(f"  {key:14s} FAILED: {row['error'][-400:]}")
        else:
            print(f"  {key:14s} {row['tokens_per_s']:10.0f} tok/s  x{row.get('vs_single_fp32', float('nan')):.2f} vs fp32 "
                  f"loss {row['losses'][-1]:.4f}  peak {row.get('peak_device_mb') or 0:.0f} MB")
    if "train" in result:
        print(json.dumps(result["train"], indent=1))


if __name__ == "__main__":
    main()
