"""Training on several ranks with PyTorch's own distributed stack (docs/distributed.md).

    group.py       who this rank is; the collectives of the update; the leader's commands
    strategy.py    single | ddp (DistributedDataParallel) | fsdp2 (fully_shard)
    shard.py       a mini-batch split over ranks by tokens
    follower.py    what a rank other than 0 runs: the leader's commands, until "stop"
"""
