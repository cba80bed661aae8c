"""A packed batch on CPU: one long row against rows of its segments, side by side in one run.

    .venv/bin/python bench/packed_cpu.py [--episodes 32 --turns 15 --window 0] [--json]

The batch is what a context window makes of a long-horizon env (KeyDoor-v0 with `keep_turns: 0`): every turn
re-renders its prompt (system, task, the kept turns, the new observation), so an episode is one segment per
turn and a packed micro-batch of 8192 tokens holds about 80 of them. On CUDA a fused variable-length kernel
attends within each segment; on CPU one packed row costs a T x T mask and T x T attention, which is why
`agentgym.trainer.forward` runs a packed batch off CUDA as right-padded rows of its segments. This prints the
forward + backward tokens/s of both (the same tiny model, the same batch, the runs interleaved) and the speedup,
and checks that both give the same log-probs. `--window N` keeps N earlier turns (larger segments).

Every segment of an episode begins with the same `--head` tokens (system prompt and task, as the window renders
them), which the segment rows read once per episode (`agentgym.policy.shared_prefix`); the third figure is the
segment rows read whole, every turn paying for the head again (`forward.SHARE_PREFIX = False`), and
`shared_prefix_speedup` is what reading the head once gains over that.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

import torch
from agentgym.trainer import forward
from agentgym.trainer.forward import token_logprobs
from agentgym.trainer.packing import Sample, micro_batches, pack

from agentgym.policy.models import load_model, tiny_model_dir

HEAD, OBS, ACT = 60, 30, 3  # tokens: system + task turn, one observation, one action (KeyDoor-v0's scale)


def windowed_sample(rng: random.Random, turns: int, window: int, vocab: int, head: int = HEAD) -> Sample:
    ids, mask, starts = [], [], []
    first = [rng.randrange(vocab) for _ in range(head)]  # every segment re-renders the system prompt and task
    for t in range(turns):
        starts.append(len(ids))
        prompt = head + min(t, window) * (OBS + ACT) + OBS
        ids += first + [rng.randrange(vocab) for _ in range(prompt - head + ACT)]
        mask += [0] * prompt + [1] * ACT
    n = len(ids)
    return Sample(episode_id=f"e{rng.random()}", input_ids=ids, loss_mask=mask, advantages=[1.0] * n,
                  behavior_logprobs=[0.0] * n, versions=[0] * n, turn_starts=[], segment_starts=starts[1:])


def timed(model: torch.nn.Module, batches: list, segments: bool, share: bool = True) -> tuple[float, torch.Tensor]:
    forward.segmented = lambda b: b.attention_mask is None and segments  # type: ignore[assignment]
    forward.SHARE_PREFIX = share
    t = time.perf_counter()
    model.zero_grad()
    logprobs = []
    for batch in batches:
        out = token_logprobs(model, batch)
        (out.logprobs * batch.loss_mask).sum().backward()
        logprobs.append(out.logprobs.detach())
    return time.perf_counter() - t, torch.cat(logprobs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--turns", type=int, default=15)
    ap.add_argument("--window", type=int, default=0, help="earlier turns kept in each prompt")
    ap.add_argument("--head", type=int, default=HEAD, help="tokens every segment of an episode begins with")
    ap.add_argument("--micro-batch-tokens", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_model(tiny_model_dir())
    model.float().train()
    rng = random.Random(0)
    samples = [windowed_sample(rng, args.turns, args.window, tok.vocab_size, args.head) for _ in range(args.episodes)]
    batches = [pack(group) for group in micro_batches(samples, args.micro_batch_tokens)]
    tokens = sum(b.num_tokens for b in batches)
    original, share = forward.segmented, forward.SHARE_PREFIX
    one_row, seg_rows, unshared = [], [], []
    try:
        for _ in range(args.repeats):
            s1, lp1 = timed(model, batches, segments=False)
            s2, lp2 = timed(model, batches, segments=True)
            s3, lp3 = timed(model, batches, segments=True, share=False)
            one_row.append(s1)
            seg_rows.append(s2)
            unshared.append(s3)
    finally:
        forward.segmented, forward.SHARE_PREFIX = original, share
    same = bool(torch.allclose(lp1, lp2, atol=1e-4) and torch.allclose(lp1, lp3, atol=1e-4))
    a, b, c = statistics.median(one_row), statistics.median(seg_rows), statistics.median(unshared)
    result = {"tokens": tokens, "micro_batches": len(batches), "segments": sum(len(s.segment_starts) + 1
                                                                             for s in samples),
              "one_row_tokens_per_s": tokens / a, "segment_rows_tokens_per_s": tokens / b,
              "unshared_segment_rows_tokens_per_s": tokens / c, "speedup": a / b, "shared_prefix_speedup": c / b,
              "same_logprobs": same}
    if args.json:
        print(json.dumps(result))
        return
    print(f"{tokens} tokens in {len(batches)} packed micro-batches, {result['segments']} segments "
          f"(window {args.window}), forward + backward, median of {args.repeats}")
    print(f"  one packed row   {result['one_row_tokens_per_s']:9.0f} tokens/s")
    print(f"  segment rows     {result['segment_rows_tokens_per_s']:9.0f} tokens/s   x{result['speedup']:.2f}")
    print(f"  segment rows, the head read by every segment {result['unshared_segment_rows_tokens_per_s']:9.0f} "
          f"tokens/s   (reading it once: x{result['shared_prefix_speedup']:.2f})")
    print(f"  same log-probs: {same}")


if __name__ == "__main__":
    main()
