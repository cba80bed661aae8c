"""Weight sync into a real `agentgym serve` engine: seconds per 100 MB for each path, against save-and-reload.

    scripts/ray-netns.sh .venv/bin/python bench/weight_sync.py --json

Starts `agentgym serve` on a tiny model of the given size (a subprocess on 127.0.0.1; run it in a
loopback-only namespace, as the process group is multi-process torch.distributed), builds the
same model in this process as the "trainer", and pushes perturbed weights through each path:
``process_group`` (bucketed gloo broadcast), ``shared_memory`` (one segment on this host) and
``save_reload`` (save_pretrained + the server loading the directory). After every push the
server's weight digest must equal the trainer's, else the run fails. With `--lora-rank R` a second
server takes pushes from a LoRA model: the two in-memory paths send only the adapter (the server
merges it), save_reload the merged model. `--json` prints one object.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch


def syncs(url: str, tokenizer: Any, workdir: Path, bucket_bytes: int) -> dict[str, Any]:
    from agentgym.trainer.sync_process_group import ProcessGroupSync
    from agentgym.trainer.sync_shared_memory import SharedMemorySync
    from agentgym.trainer.weight_sync import SaveAndReloadSync

    from agentgym.policy.openai import OpenAIBackend

    return {"process_group": ProcessGroupSync([url], bucket_bytes=bucket_bytes),
            "shared_memory": SharedMemorySync([url], bucket_bytes=bucket_bytes),
            "save_reload": SaveAndReloadSync(OpenAIBackend(f"{url}/v1", tokenizer=tokenizer), workdir, tokenizer)}


def measure(hidden: int, layers: int, repeats: int, lora_rank: int = 0, bucket_mb: int = 256) -> dict[str, Any]:
    """Mean push seconds per path (after one untimed set-up push), each push verified by digest."""
    import httpx
    from agentgym.trainer.model import ModelSpec, build_model, lora_adapter_state, merged_state_dict

    from agentgym.launch import serve_model
    from agentgym.policy.models import TinyModelSpec, tiny_model_dir
    from agentgym.policy.weight_buckets import digest

    tiny = TinyModelSpec(hidden_size=hidden, num_layers=layers, intermediate_size=4 * hidden, num_heads=8,
                         num_kv_heads=8, vocab_size=4096)
    model, tokenizer = build_model(ModelSpec(tiny=tiny, device="cpu", lora_rank=lora_rank, lora_alpha=2 * lora_rank))
    nbytes = sum(t.numel() * t.element_size() for t in merged_state_dict(model).values())
    sent = sum(t.numel() * t.element_size() for t in lora_adapter_state(model)[0].values()) if lora_rank else nbytes
    server = serve_model(tiny_model_dir(tiny), timeout_s=180)
    url = server.url
    out: dict[str, Any] = {"model_mb": nbytes / 1e6, "adapter_mb": sent / 1e6 if lora_rank else None,
                           "repeats": repeats, "bucket_mb": bucket_mb, "paths": {}}
    version = 0
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name, sync in syncs(url, tokenizer, Path(tmp), bucket_mb << 20).items():
                seconds = []
                for _ in range(repeats + 1):  # the first push of a path also sets it up (group, segment): not timed
                    with torch.no_grad():
                        for p in model.parameters():
                            if p.requires_grad:
                                p.add_(0.001)
                    version += 1
                    started = time.perf_counter()
                    sync.push(model, version)
                    seconds.append(time.perf_counter() - started)
                    served = httpx.get(f"{url}/agentgym/weights/digest", timeout=60).json()
                    if served["digest"] != digest(merged_state_dict(model)) or served["version"] != version:
                        raise RuntimeError(f"{name}: the server's weights differ from the trainer's after version "
                                           f"{version}")
                mean = sum(seconds[1:]) / repeats
                out["paths"][name] = {"push_s": mean, "s_per_100mb": mean / (nbytes / 1e8), "verified": True}
                if hasattr(sync, "close"):
                    sync.close()
    finally:
        server.stop()
    base = out["paths"]["save_reload"]["s_per_100mb"]
    for row in out["paths"].values():
        row["speedup_vs_save_reload"] = base / row["s_per_100mb"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--bucket-mb", type=int, default=256, help="weight_sync_bucket_mb (the config's default: 256)")
    ap.add_argument("--lora-rank", type=int, default=0, help="also measure a LoRA model (adapter-only pushes)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    result = measure(args.hidden, args.layers, args.repeats, bucket_mb=args.bucket_mb)
    if args.lora_rank:
        result["lora"] = measure(args.hidden, args.layers, args.repeats, lora_rank=args.lora_rank,
                                 bucket_mb=args.bucket_mb)
    if args.json:
        print(json.dumps(result))
        return
    print(f"model {result['model_mb']:.1f} MB, buckets of {args.bucket_mb} MB, mean of {args.repeats} pushes")
    for name, row in result["paths"].items():
        print(f"  {name:14s} {row['push_s']:.3f} s/push  {row['s_per_100mb']:.3f} s/100MB  "
              f"x{row['speedup_vs_save_reload']:.1f} vs save_reload")
    if args.lora_rank:
        lora = result["lora"]
        print(f"LoRA rank {args.lora_rank}: adapter {lora['adapter_mb']:.2f} MB of {lora['model_mb']:.1f} MB")
        for name, row in lora["paths"].items():
            print(f"  {name:14s} {row['push_s']:.3f} s/push  x{row['speedup_vs_save_reload']:.1f} vs save_reload")


if __name__ == "__main__":
    main()
