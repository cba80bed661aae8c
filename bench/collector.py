"""Collector benchmark: framework overhead, KV-cache prefill savings, partial rollouts, memory at 256 episodes.

    python bench/collector.py            # a table
    python bench/collector.py --json     # one JSON object

Measured side by side in one run (ratios, not absolute claims):

(a) overhead: turns/s of the collector with a no-op env (native async) and an
    instant scripted policy (labelled): everything but the env and the model.
(b) prefill: with the `hf` backend and the tiny model on Maze-v0, the tokens
    the model encoded (prefill plus decode inputs) against the ideal of each
    context token once; the same with KV reuse off (a naive re-encode of the
    whole conversation every turn). `prefill_efficiency` = ideal / actual.
(c) partial rollouts vs plain batch rounds: episodes/s on a *simulated*
    policy (SimulatedBackend: long-tailed generation lengths, fixed time per
    token; a simulation, labelled as such), same number of finished groups.
(d) peak resident memory of a fresh collector process holding 256 concurrent
    Maze-v0 episodes with the `hf` backend and the tiny model.

Targets: (a) >= 5,000 turns/s on one core; (b) efficiency >= 0.95;
(c) >= 1.2x; (d) < 2 GiB.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentgym.collector import Collector, Task  # noqa: E402
from agentgym.core import AgentEnv  # noqa: E402
from agentgym.policy.base import SamplingParams  # noqa: E402
from agentgym.policy.scripted import ScriptedBackend, SimulatedBackend  # noqa: E402


class NoopEnv(AgentEnv):
    """Ends after `turns` steps; native async, does nothing."""

    def __init__(self, turns: int = 50):
        super().__init__()
        self.turns, self.t = turns, 0

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return "start", {}

    def step(self, action):
        self.t += 1
        done = self.t >= self.turns
        return "ok", float(done), done, False, {}

    async def areset(self, *, seed=None, options=None):
        return self.reset(seed=seed, options=options)

    async def astep(self, action):
        return self.step(action)


def instant(messages):
    """Scripted policy (labelled): answers at once."""
    return "x"


async def overhead(episodes: int = 200, turns: int = 50) -> float:
    collector = Collector(lambda: NoopEnv(turns), ScriptedBackend(instant), progress=False, concurrency=64,
                          max_turns=turns)
    await collector.collect([Task(str(i)) for i in range(4)])  # warm up
    started = time.perf_counter()
    result = await collector.collect([Task(str(i)) for i in range(episodes)])
    return result.turns / (time.perf_counter() - started)


async def prefill(reuse: bool, episodes: int = 8, turns: int = 6) -> tuple[float, int, int]:
    """(ideal / encoded, ideal, encoded) for the hf backend on Maze-v0."""
    from agentgym.policy.hf import HFBackend
    from agentgym.policy.models import tiny_model_dir

    backend = HFBackend.from_pretrained(tiny_model_dir(), reuse_cache=reuse)
    collector = Collector("Maze-v0", backend, progress=False, max_turns=turns,
                          sampling=SamplingParams(max_new_tokens=8, seed=0))
    result = await collector.collect([Task(f"easy-{i}", seed=i) for i in range(episodes)])
    ideal = sum(sum(len(t.prompt_ids) + len(t.action_ids) for t in e.turns) - 1 for e in result.episodes)
    await collector.aclose()
    await backend.aclose()
    return ideal / backend.stats.encoded_tokens, ideal, backend.stats.encoded_tokens


def long_tail(rng: random.Random) -> int:
    return 400 if rng.random() < 0.1 else rng.randint(10, 40)


async def rounds(partial: bool, n_rounds: int = 6, target: int = 8, group: int = 4) -> float:
    """Episodes/s over `n_rounds` rounds of `target` finished groups (simulated policy)."""
    policy = SimulatedBackend(instant, long_tail, token_seconds=2e-4, seed=7)
    collector = Collector(lambda: NoopEnv(3), policy, progress=False, concurrency=512)
    tasks = iter(Task(str(i)) for i in range(10**6))
    started, done = time.perf_counter(), 0
    for _ in range(n_rounds):
        if partial:
            result = await collector.collect_round(tasks, target_groups=target, group_size=group)
        else:
            result = await collector.collect([next(tasks) for _ in range(target)], group_size=group)
        done += len(result.episodes)
        policy.update_weights(None)
    return done / (time.perf_counter() - started)


async def hold_256() -> float:
    """Run 256 concurrent Maze-v0 episodes on the hf backend; peak RSS in MiB of this process."""
    from agentgym.policy.hf import HFBackend
    from agentgym.policy.models import tiny_model_dir

    backend = HFBackend.from_pretrained(tiny_model_dir(), max_batch_size=256)
    collector = Collector("Maze-v0", backend, progress=False, concurrency=256, max_turns=6,
                          sampling=SamplingParams(max_new_tokens=8, seed=0))
    result = await collector.collect([Task(f"easy-{i}", seed=i) for i in range(64)], group_size=4)
    assert len(result.episodes) == 256
    await collector.aclose()
    await backend.aclose()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_rss_256() -> float:
    out = subprocess.run([sys.executable, __file__, "--hold-256"], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


async def main(as_json: bool) -> None:
    results = {"overhead_turns_per_s": await overhead()}
    results["prefill_efficiency"], ideal, encoded = await prefill(reuse=True)
    results["naive_prefill_efficiency"], _, naive = await prefill(reuse=False)
    batch, part = await rounds(partial=False), await rounds(partial=True)
    results["partial_vs_batch_speedup"] = part / batch
    results["peak_rss_mb_256"] = peak_rss_256()
    if as_json:
        print(json.dumps({k: round(v, 3) for k, v in results.items()}))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="collector benchmark (one run, side by side)")
    for col in ("measure", "value", "target"):
        table.add_column(col)
    table.add_row("(a) overhead, no-op env + instant scripted policy", f"{results['overhead_turns_per_s']:,.0f} turns/s",
                  ">= 5,000")
    table.add_row("(b) hf prefill efficiency, KV reuse (ideal/encoded)",
                  f"{results['prefill_efficiency']:.3f} ({ideal}/{encoded})", ">= 0.95")
    table.add_row("(b) hf prefill efficiency, naive re-encode", f"{results['naive_prefill_efficiency']:.3f} "
                  f"({ideal}/{naive})", "-")
    table.add_row("(c) partial vs batch rounds, SIMULATED long-tailed policy",
                  f"{results['partial_vs_batch_speedup']:.2f}x ({part:.1f} vs {batch:.1f} ep/s)", ">= 1.2x")
    table.add_row("(d) peak RSS, 256 concurrent Maze-v0 episodes, hf tiny", f"{results['peak_rss_mb_256']:.0f} MiB",
                  "< 2048 MiB")
    Console().print(table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--hold-256", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hold_256:
        print(asyncio.run(hold_256()))
    else:
        asyncio.run(main(args.json))
