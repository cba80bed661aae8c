"""One rank of a fixed-batch update run: the worker that `bench/trainer.py` and the parity tests launch.

    torchrun --nproc-per-node 2 bench/trainer_ranks.py --strategy fsdp2 --updates 3 --out result.json
    scripts/ray-netns.sh python bench/trainer_ranks.py --ray 2 --strategy ddp --out result.json   # Ray actors

Every rank builds the policy side of a tiny-model config (`build_policy_side`, so the
strategy, sharding and loss normalisation are the trainer's own), then runs
`--updates` updates on the same *synthetic* global batch (seeded random token ids
and rewards: a workload, not rollouts). Rank 0 writes the objective of each
update, the update tokens/s and (with --weights) the full weights after the last
update. The same batch with any world size must give the same numbers.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

import torch


def synthetic_batch(groups: int, group_size: int, turns: int, vocab: int, seed: int):
    """A seeded GRPO batch: `groups` x `group_size` episodes of `turns` turns, lengths and rewards varied."""
    from agentgym.data import TrainBatch
    from agentgym.trajectory import Episode, Turn

    rng = random.Random(seed)
    episodes = []
    for g in range(groups):
        for _ in range(group_size):
            ep = Episode(group_id=f"g{g}", task_id=f"t{g}", total_reward=float(rng.random() < 0.5) + rng.random())
            for t in range(turns):
                n_act = rng.randint(2, 8)
                ep.turns.append(Turn(index=t, prompt_ids=[rng.randrange(vocab) for _ in range(rng.randint(6, 24))],
                                     action_ids=[rng.randrange(vocab) for _ in range(n_act)],
                                     action_logprobs=[-rng.uniform(0.5, 3.0) for _ in range(n_act)],
                                     token_versions=[0] * n_act))
            ep.turns[-1].reward, ep.turns[-1].terminated = ep.total_reward, True  # what per-turn estimators read
            episodes.append(ep)
    return TrainBatch(episodes, [1.0] * len(episodes), [0] * len(episodes), version=0, index=0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strategy", default="single", choices=("single", "ddp", "fsdp2"))
    ap.add_argument("--world-size", type=int, default=None, help="default: WORLD_SIZE from the launcher, else 1")
    ap.add_argument("--updates", type=int, default=3)
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=4)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--sft-steps", type=int, default=0, help="SFT warm start steps on the batch's episodes first")
    ap.add_argument("--set", action="append", default=[], help="config override KEY=VALUE (YAML value)")
    ap.add_argument("--out", required=True, help="rank 0 writes its JSON result here")
    ap.add_argument("--weights", default=None, help="rank 0 saves the full weights here (torch.save)")
    ap.add_argument("--adapter", default=None, help="a LoRA run: rank 0 saves the adapter as an adapter-only weight "
                    "sync gathers it (torch.save of lora_adapter_state) here")
    ap.add_argument("--load", default=None, help="resume from this run directory's latest sharded checkpoint first")
    ap.add_argument("--save", default=None, help="save a sharded checkpoint into this run directory at the end")
    ap.add_argument("--ray", type=int, default=0, metavar="N",
                    help="start N rank actors on a local Ray cluster (one process group) instead of running here")
    args = ap.parse_args()
    if args.ray:
        on_ray(args.ray)
    else:
        run_rank(args)


def on_ray(world: int) -> None:
    """Run this script's rank body in `world` Ray actors that form one process group (trainer.distributed.ray_ranks)."""
    import sys
    import tempfile

    import ray
    from agentgym.trainer.distributed.ray_ranks import rank_env, rendezvous

    argv = [a for a in sys.argv[1:]]
    i = argv.index("--ray")
    del argv[i:i + 2]
    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             _temp_dir=tempfile.mkdtemp(prefix="agr-", dir="/tmp"), log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(Path(__file__).resolve().parents[1])}})
    try:
        endpoint = rendezvous(ray, "DEFAULT")

        def rank_main(argv: list[str]) -> None:
            sys.argv = ["trainer_ranks.py", *argv]
            main()

        task = ray.remote(rank_main)
        ray.get([task.options(num_cpus=0, runtime_env={"env_vars": rank_env(r, world, r, endpoint)}).remote(argv)
                 for r in range(world)], timeout=600)
    finally:
        ray.shutdown()


def run_rank(args: argparse.Namespace) -> None:
    import os

    import yaml
    from agentgym.trainer.components import build_policy_side

    from agentgym.config import load_train_config

    world = args.world_size or int(os.environ.get("WORLD_SIZE", 1))
    overrides = {"strategy": args.strategy, "world_size": world, "tiny_hidden_size": args.hidden,
                 "tiny_layers": args.layers, "torch_threads": 1, "mini_batches": 2, "micro_batch_tokens": 256,
                 "importance": "tis", "dist_timeout_s": 120, "device": "cpu"}
    overrides.update({k: yaml.safe_load(v) for k, v in (s.split("=", 1) for s in args.set)})
    cfg = load_train_config(None, overrides)
    torch.set_num_threads(1)
    torch.manual_seed(cfg.seed)
    if int(os.environ.get("RANK", 0)) != 0:  # a follower: the leader's commands until "stop"
        from agentgym.trainer.distributed.follower import follow

        follow(cfg)
        return
    side = build_policy_side(cfg)
    group = side.updater.strategy.group
    batch = synthetic_batch(args.groups, args.group_size, args.turns, vocab=side.tokenizer.vocab_size, seed=7)
    from agentgym.trainer.checkpoint import TrainerState
    from agentgym.trainer.distributed.checkpoint import ShardedCheckpointManager

    def checkpoints(run_dir: str) -> ShardedCheckpointManager:
        return ShardedCheckpointManager(run_dir, group, side.updater.strategy)

    done = 0
    if args.load:
        ckpt = checkpoints(args.load)
        state = ckpt.load(ckpt.latest(), model=side.model, optimizer=side.optimizer, scheduler=side.scheduler)
        side.updater.load_shuffle_state(state.extra)
        done = state.update
    sft_losses = []
    if args.sft_steps:
        from agentgym.trainer.sft import sft_policy_side

        sft = sft_policy_side(side, batch.episodes, steps=args.sft_steps, lr=cfg.sft_lr, seed=cfg.seed,
                              micro_batch_tokens=cfg.micro_batch_tokens)
        sft_losses = [sft.first_loss, sft.last_loss]
    losses, critic_losses, tokens, seconds = [], [], 0, 0.0
    for _ in range(args.updates):
        started = time.perf_counter()
        stats = side.updater.update(batch)
        seconds += time.perf_counter() - started
        losses.append(stats.loss)
        critic_losses.append(stats.critic.get("value_loss"))
        tokens += stats.tokens
    if args.save:
        checkpoints(args.save).save(model=side.model, tokenizer=None, optimizer=side.optimizer,
                                    scheduler=side.scheduler, state=TrainerState(done + args.updates, 0, {}, side.updater.shuffle_state()))
    if args.adapter:
        from agentgym.trainer.model import lora_adapter_state

        torch.save(lora_adapter_state(side.model), args.adapter)
    full = side.updater.strategy.gathered_state_dict()
    Path(args.out).write_text(json.dumps({"strategy": cfg.strategy, "world_size": world, "losses": losses,
                                          "sft_losses": sft_losses, "critic_losses": critic_losses,
                                          "tokens_per_s": tokens / seconds, "update_s": seconds / args.updates,
                                          "peak_device_mb": peak_device_mb()}))
    if args.weights:
        torch.save(full, args.weights)
    group.lead("stop")
    group.close(drain=True)


def peak_device_mb() -> float | None:
    """The most GPU memory this rank's tensors took (None on CPU)."""
    return torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else None


if __name__ == "__main__":
    main()
