"""Weight sync without the disk into a real `agentgym serve` engine, in a loopback-only network namespace.

`bench/weight_sync.py` starts the server on the tiny model, then pushes perturbed weights through the
process group (bucketed gloo broadcast), shared memory and save-and-reload; after every push it compares
the server's weight digest with the trainer's and fails on any difference. Then the same with a LoRA
model, whose in-memory pushes carry only the adapter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from agentgym.policy.weight_buckets import (
    BufferPool,
    Manifest,
    copy_into,
    digest,
    one_thread,
    pack,
    plan,
    unpack,
)

ROOT = Path(__file__).resolve().parents[2]


def test_buckets_round_trip_through_a_json_manifest():
    state = {"a": torch.randn(3, 4), "b": torch.randn(10).bfloat16(), "c": torch.randn(100), "d": torch.randn(2)}
    manifest = plan(state, bucket_bytes=64)
    assert [b.dtype for b in manifest.buckets].count("bfloat16") == 1
    assert all(b.nbytes <= 64 or len(b.entries) == 1 for b in manifest.buckets)  # a big tensor goes alone
    again = Manifest.from_dict(json.loads(json.dumps(manifest.to_dict())))
    out = {}
    for bucket, flat in zip(again.buckets, pack(state, again), strict=True):
        out.update(unpack(bucket, flat))
    assert digest(out) == digest(state) and out.keys() == state.keys()


def test_pooled_send_buffers_keep_at_most_two_buckets_per_dtype_between_pushes():
    state = {"a": torch.randn(3, 4), "b": torch.randn(10).bfloat16(), "c": torch.randn(100), "d": torch.randn(2)}
    manifest, pool = plan(state, bucket_bytes=64), BufferPool()
    held = []
    for _ in range(2):  # a second push reuses the buffers
        out = {}
        for bucket, flat in zip(manifest.buckets, pack(state, manifest, buffers=pool), strict=True):
            out.update({k: v.clone() for k, v in unpack(bucket, flat)})  # sent before its slot is refilled
        assert digest(out) == digest(state)
        held.append(pool.nbytes)
    largest = {d: max(b.nbytes for b in manifest.buckets if b.dtype == d) for d in ("float32", "bfloat16")}
    assert held[0] == held[1] <= 2 * sum(largest.values())


def test_copy_into_writes_in_place_for_every_layout_and_dtype():
    for src, dst in [(torch.randn(4, 5), torch.empty(20)),  # contiguous, one dtype: the memcpy path
                     (torch.randn(6).bfloat16(), torch.empty(2, 3, dtype=torch.bfloat16)),
                     (torch.randn(5, 4).t(), torch.empty(4, 5)),  # a strided source
                     (torch.randn(3, 3), torch.empty(3, 3, dtype=torch.bfloat16)),  # a dtype conversion
                     (torch.randn(2, 2, requires_grad=True), torch.nn.Parameter(torch.zeros(2, 2)))]:
        storage = dst.data_ptr()
        copy_into(dst, src)
        assert dst.data_ptr() == storage  # written in place, never rebound
        assert torch.equal(dst.reshape(-1), src.detach().to(dst.dtype).reshape(-1))
    before = torch.get_num_threads()
    with one_thread():
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == before


@pytest.mark.skipif(not (shutil.which("unshare") and shutil.which("ip")), reason="needs unshare and ip")
def test_every_sync_path_lands_the_trainers_weights_in_agentgym_serve():
    pytest.importorskip("uvicorn")
    done = subprocess.run([str(ROOT / "scripts" / "ray-netns.sh"), sys.executable, str(ROOT / "bench" / "weight_sync.py"),
                           "--hidden", "64", "--layers", "2", "--repeats", "1", "--lora-rank", "4", "--json"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(result["paths"]) == {"process_group", "shared_memory", "save_reload"}
    assert all(row["verified"] for row in result["paths"].values())
    lora = result["lora"]  # a LoRA model: the in-memory paths send only the adapter, the server merges it
    assert lora["adapter_mb"] < lora["model_mb"] / 4
    assert all(row["verified"] for row in lora["paths"].values())
