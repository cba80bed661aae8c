"""Split a mini-batch over ranks by tokens, so that the ranks finish their passes together.

Every rank sees the whole batch (the leader broadcasts it) and computes the same
split: longest samples first, each to the rank with the fewest tokens so far
(LPT), then back in batch order. Each rank cuts its share into micro-batches of
at most `micro_batch_tokens` (`PolicyUpdater`). Under fsdp2 every forward is a
collective, so all ranks must run the same number of passes: a rank with fewer
micro-batches runs *idle* ones, a real sample with its loss mask zeroed, which
adds nothing to the loss or the gradient.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from agentgym.trainer.packing import Sample


def split_by_tokens(samples: Sequence[Sample], world_size: int) -> list[list[Sample]]:
    """`world_size` shares of `samples`, balanced by token count, each in the batch's order."""
    loads = [0] * world_size
    owner: dict[int, int] = {}
    for i in sorted(range(len(samples)), key=lambda i: (-len(samples[i]), i)):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        owner[i] = rank
        loads[rank] += len(samples[i])
    return [[s for i, s in enumerate(samples) if owner[i] == r] for r in range(world_size)]


def idle_sample(sample: Sample) -> Sample:
    """`sample` with nothing to learn: a zero loss mask and zero advantages (a placeholder pass)."""
    n = len(sample)
    return dataclasses.replace(sample, episode_id=f"{sample.episode_id}#idle", loss_mask=[0] * n,
                               advantages=[0.0] * n, turn_starts=[], turn_lengths=[], turn_returns=[])
