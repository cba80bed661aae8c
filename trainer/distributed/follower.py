"""What a rank other than 0 runs: build its part of the policy, then obey the leader until "stop".

The leader (rank 0) runs the whole local pipeline; a follower holds no collector,
store or run log. Each command makes it enter the collectives the leader enters
next, in the same order:

    update <samples> the policy epochs on its share of the leader's samples (advantages computed by the leader,
                     which alone holds the critic and the learned credit models)
    sft <demos>      its share of the SFT warm start's steps
    gather           its part of gathering the full weights (fsdp2 weight sync)
    gather_adapter   its part of gathering a LoRA adapter (fsdp2 adapter-only weight sync)
    save <dir>       its DCP shard of a checkpoint (+ the gather for policy/)
    load <dir>       its shard of a checkpoint, resharded to this world size
    stop             leave (the run is over)
"""

from __future__ import annotations

import logging

from agentgym.trainer.components import build_policy_side
from agentgym.trainer.distributed.checkpoint import ShardedCheckpointManager
from agentgym.trainer.sft import sft_policy_side

from agentgym.config import TrainConfig

log = logging.getLogger(__name__)


def follow(cfg: TrainConfig) -> int:
    """Serve the leader's commands until "stop"; returns the number of updates done."""
    side = build_policy_side(cfg)
    strategy = side.updater.strategy
    group = strategy.group
    ckpt = ShardedCheckpointManager(cfg.run_dir, group, strategy, keep=cfg.keep_checkpoints)
    updates, stopped = 0, False
    try:
        while True:
            command, payload = group.next_command()
            if command == "update":
                side.updater.follow_update(payload)
                updates += 1
            elif command == "sft":
                sft_policy_side(side, **payload)
            elif command == "gather":
                strategy.full_state_dict()
            elif command == "gather_adapter":
                strategy.gathered_adapter_state()
            elif command == "save":
                ckpt.save_shards(payload, side.optimizer)
            elif command == "load":
                state = ckpt.load_shards(payload, side.optimizer, side.scheduler)
                side.updater.updates_done = state["update"]
                side.updater.load_shuffle_state(state["extra"])
            elif command == "stop":
                stopped = True
                return updates
            else:
                raise RuntimeError(f"rank {group.rank}: unknown command {command!r} from the leader")
    finally:
        group.close(drain=stopped)  # with the leader's own drain after "stop" (RankGroup.release)
