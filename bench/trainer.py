"""Trainer throughput per strategy and world size, and weight-sync cost per path, side by side in one run.

    .venv/bin/python bench/trainer.py --json

- update tokens/s of the same seeded synthetic batch (`bench/trainer_ranks.py`) for single, ddp and fsdp2
  at 1 rank and ddp and fsdp2 at 2 ranks (torchrun, gloo, CPU), each with its ratio to single;
- weight-sync seconds per 100 MB into a real `agentgym serve` for process_group, shared_memory and
  save_reload (`bench/weight_sync.py`), each with its speedup over save_reload; then the same for a
  LoRA model, whose in-memory pushes carry only the adapter.

Multi-process runs go through scripts/ray-netns.sh (a loopback-only network namespace). On a 2-core
machine 2 ranks share the cores with each other: the 2-rank figures show the overhead of the
collectives, not a speedup. `--json` prints exactly one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NETNS = str(ROOT / "scripts" / "ray-netns.sh")
BIN = Path(sys.executable).parent


def update_run(strategy: str, world: int, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    out = workdir / f"{strategy}-{world}.json"
    worker = [str(ROOT / "bench" / "trainer_ranks.py"), "--strategy", strategy, "--updates", str(args.updates),
              "--groups", str(args.groups), "--hidden", str(args.hidden), "--layers", str(args.layers),
              "--out", str(out), "--set", f"micro_batch_tokens={args.micro_batch_tokens}"]
    if world == 1:
        cmd = [sys.executable, *worker]
    else:
        cmd = [NETNS, str(BIN / "torchrun"), f"--nproc-per-node={world}", "--master-addr=127.0.0.1",
               "--master-port=29500", *worker]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        raise RuntimeError(f"{strategy} x{world} failed:\n{done.stderr[-3000:]}")
    return json.loads(out.read_text())


def sync_run(args: argparse.Namespace) -> dict[str, Any]:
    cmd = [NETNS, sys.executable, str(ROOT / "bench" / "weight_sync.py"), "--hidden", str(args.sync_hidden),
           "--layers", str(args.sync_layers), "--repeats", str(args.sync_repeats), "--lora-rank", str(args.sync_lora_rank),
           "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env={**os.environ, "PYTHONPATH": str(ROOT)})
    if done.returncode != 0:
        raise RuntimeError(f"weight sync bench failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--updates", type=int, default=4)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--micro-batch-tokens", type=int, default=512)
    ap.add_argument("--sync-hidden", type=int, default=512)
    ap.add_argument("--sync-layers", type=int, default=8)
    ap.add_argument("--sync-repeats", type=int, default=3)
    ap.add_argument("--sync-lora-rank", type=int, default=8, help="also a LoRA model of this rank (adapter-only pushes)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    runs = [("single", 1), ("ddp", 1), ("fsdp2", 1), ("ddp", 2), ("fsdp2", 2)]
    with tempfile.TemporaryDirectory() as tmp:
        rows = {f"{s}x{w}": update_run(s, w, args, Path(tmp)) for s, w in runs}
    base = rows["singlex1"]["tokens_per_s"]
    updates = {k: {"tokens_per_s": r["tokens_per_s"], "update_s": r["update_s"], "vs_single": r["tokens_per_s"] / base,
                   "loss_last": r["losses"][-1]} for k, r in rows.items()}
    result = {"device": "cpu", "cores": os.cpu_count(), "model": {"hidden": args.hidden, "layers": args.layers},
              "update": updates, "weight_sync": sync_run(args)}
    if args.json:
        print(json.dumps(result))
        return
    print(f"update tokens/s (CPU, {os.cpu_count()} cores, tiny model hidden {args.hidden} x {args.layers} layers)")
    for key, row in updates.items():
        print(f"  {key:10s} {row['tokens_per_s']:9.0f} tok/s  x{row['vs_single']:.2f} vs single")
    sync = result["weight_sync"]
    print(f"weight sync, {sync['model_mb']:.0f} MB model")
    for name, row in sync["paths"].items():
        print(f"  {name:14s} {row['s_per_100mb']:.3f} s/100MB  x{row['speedup_vs_save_reload']:.1f} vs save_reload")
    if "lora" in sync:
        print(f"LoRA rank {args.sync_lora_rank}: adapter {sync['lora']['adapter_mb']:.2f} MB")
        for name, row in sync["lora"]["paths"].items():
            print(f"  {name:14s} {row['push_s']:.3f} s/push  x{row['speedup_vs_save_reload']:.1f} vs save_reload")


if __name__ == "__main__":
    main()
