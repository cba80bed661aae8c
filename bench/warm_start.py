"""Warm-start probe: how much of an env a recipe's SFT warm start teaches, before any RL.

    python bench/warm_start.py configs/keydoor.yaml                          # the recipe's own sft_steps
    python bench/warm_start.py configs/keydoor.yaml --stages 60,90 --set sft_episodes=128
    python bench/warm_start.py configs/keydoor.yaml --set sft_episodes=256 --set sft_batch_episodes=32
    python bench/warm_start.py configs/quickstart.yaml --tasks 32 --json

Builds the recipe's model, collects its solver demonstrations (with the run's context window) and runs
SFT in stages (`--stages 60,90`: 60 steps, evaluate, 90 more, evaluate; one optimizer per stage). After
each stage the policy plays the first `--tasks` held-out tasks (the env's eval split) once sampled at the
recipe's temperature and once greedy, and the probe reports success, turns per episode, the share of
generations cut at `max_new_tokens` and the share of invalid actions. A group-relative estimator needs
sampled success well above 0 (and below 1) to learn from; this tells whether a recipe gives it that,
in minutes rather than a training run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentgym.config import load_train_config  # noqa: E402
from bench.learning import parse_sets  # noqa: E402


def play_episodes(cfg, side, backend, tasks: list[str], temperature: float) -> list:
    """One episode per task (seeded by its position) with `backend` at `temperature`."""
    from agentgym.trainer.components import context_settings

    from agentgym.collector.collector import Collector
    from agentgym.collector.config import Task
    from agentgym.policy.base import SamplingParams

    collector = Collector(cfg.env, backend, None, tokenizer=side.prompt_tokenizer, env_kwargs=cfg.env_kwargs,
                          max_turns=cfg.max_turns, concurrency=cfg.concurrency, progress=False,
                          sampling=SamplingParams(temperature=temperature, max_new_tokens=cfg.max_new_tokens,
                                                  seed=cfg.seed),
                          **context_settings(cfg))

    async def go():
        try:
            return (await collector.collect([Task(t, seed=i) for i, t in enumerate(tasks)])).episodes
        finally:
            await collector.aclose()

    return asyncio.run(go())


def play(cfg, side, backend, tasks: list[str], temperature: float) -> dict[str, float]:
    """One episode per task with `backend`; success, turns per episode, cut and invalid shares."""
    episodes = play_episodes(cfg, side, backend, tasks, temperature)
    turns = [t for e in episodes for t in e.turns]
    return {"success": sum(e.total_reward >= cfg.success_reward for e in episodes) / len(episodes),
            "turns_per_episode": len(turns) / len(episodes),
            "cut": sum(t.finish_reason == "length" for t in turns) / max(1, len(turns)),
            "invalid": sum(not t.valid for t in turns) / max(1, len(turns))}


def prepared(cfg):
    """The recipe's policy side, rollout backend, task split and solver demonstrations, before any SFT step."""
    import torch
    from agentgym.trainer.components import build_backend, build_policy_side, context_settings, split_tasks
    from agentgym.trainer.sft import collect_demonstrations

    from agentgym.env_facts import resolve_run_env

    torch.set_num_threads(cfg.torch_threads)
    resolved, facts = resolve_run_env(cfg)
    cfg = resolved or cfg
    side = build_policy_side(cfg)
    train, held_out = split_tasks(cfg, facts)
    demos = asyncio.run(collect_demonstrations(cfg.env, cfg.env_kwargs, side.prompt_tokenizer,
                                               train[:cfg.sft_episodes], max_turns=cfg.max_turns, seed=cfg.seed,
                                               context=context_settings(cfg)))
    backend, _ = build_backend(cfg, side.model, side.tokenizer)
    return cfg, side, backend, train, held_out, demos


def sft_stage(cfg, side, backend, demos, steps: int, seed: int):
    """`steps` SFT steps on `demos` (one optimizer), then the rollout backend takes the new weights."""
    from agentgym.trainer.sft import sft

    stats = sft(side.model, demos, steps=steps, lr=cfg.sft_lr, seed=seed, packed=side.packed,
                pad_id=side.tokenizer.pad_token_id or 0, micro_batch_tokens=cfg.micro_batch_tokens,
                batch_episodes=cfg.sft_batch_episodes)
    backend.model.load_state_dict(side.model.state_dict())
    return stats


def warm_started(cfg):
    """The recipe's warm start as a run would make it: (cfg, policy side, backend, train tasks, held-out tasks)."""
    cfg, side, backend, train, held_out, demos = prepared(cfg)
    if cfg.sft_steps:
        sft_stage(cfg, side, backend, demos, cfg.sft_steps, cfg.seed)
    return cfg, side, backend, train, held_out


def probe(cfg, stages: list[int], n_tasks: int) -> list[dict[str, object]]:
    """SFT in `stages`, each followed by a sampled and a greedy pass over the held-out tasks."""
    cfg, side, backend, train, held_out, demos = prepared(cfg)
    tasks, rows, steps = (held_out or train)[:n_tasks], [], 0
    for i, n in enumerate(stages):
        started = time.perf_counter()
        stats = sft_stage(cfg, side, backend, demos, n, cfg.seed + i)
        steps += n
        rows.append({"sft_steps": steps, "demonstrations": len(demos), "nll": round(stats.last_loss, 4),
                     "sft_s": round(time.perf_counter() - started, 1),
                     "sampled": play(cfg, side, backend, tasks, cfg.temperature),
                     "greedy": play(cfg, side, backend, tasks, 0.0)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("recipe", help="a training config (configs/NAME.yaml)")
    parser.add_argument("--stages", default=None, help="SFT steps per stage, comma-separated (default: sft_steps)")
    parser.add_argument("--tasks", type=int, default=64, help="held-out tasks played after each stage")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    cfg = load_train_config(args.recipe, {"output_dir": "/tmp/agentgym-warm-start", **parse_sets(parser, args.set)})
    stages = [int(s) for s in args.stages.split(",")] if args.stages else [cfg.sft_steps]
    if not stages or min(stages) < 1:
        parser.error(f"--stages takes positive step counts, got {args.stages!r}")
    rows = probe(cfg, stages, args.tasks)
    if args.json:
        print(json.dumps({"recipe": args.recipe, "env": cfg.env, "stages": rows}))
        return
    for r in rows:
        s, g = r["sampled"], r["greedy"]
        print(f"after {r['sft_steps']} SFT steps ({r['demonstrations']} demonstrations, NLL {r['nll']}, "
              f"{r['sft_s']}s): sampled success {s['success']:.3f}, greedy {g['success']:.3f}; turns/episode "
              f"{s['turns_per_episode']:.1f}; cut {s['cut']:.3f}, invalid {s['invalid']:.3f} (sampled)")


if __name__ == "__main__":
    main()
