"""The trainer's process group: who this rank is, and the few collectives the update needs.

A run with `strategy: ddp | fsdp2` is `world_size` processes. They are started
by `torchrun` (which sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT)
or by the Ray runtime (trainer actors that set the same variables), or, for a
world of one, by nothing at all: a one-rank group on an in-process store.

Rank 0 is the *leader*: it runs the whole local pipeline (collector, data
manager, run log, weight sync). The other ranks are *followers*: they hold a
shard (fsdp2) or a replica (ddp) of the policy and do what the leader tells
them through `lead` / `next_command`, so every collective is entered by every
rank in the same order. A collective that a dead rank never joins fails after
`dist_timeout_s` (gloo and NCCL both honour the group's timeout) with
`RankFailure`, never a hang.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import torch

from agentgym.errors import AgentGymError, ConfigError


class RankFailure(AgentGymError, RuntimeError):
    """Another rank of the trainer's process group died or stopped answering."""


@dataclass
class RankGroup:
    """This process's place in the trainer group (a world of one needs no torch.distributed at all)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    backend: str = "none"  #: gloo | nccl | none (no process group)

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """A torch.distributed process group exists (also for a one-rank ddp/fsdp2 run)."""
        return self.backend != "none"

    # ---- collectives (identity for a world of one) ---------------------------------------------
    def all_sum(self, values: list[float]) -> list[float]:
        if self.world_size == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self._comm_device())
        self._call(torch.distributed.all_reduce, t, op=torch.distributed.ReduceOp.SUM)
        return t.tolist()

    def all_max(self, values: list[float]) -> list[float]:
        if self.world_size == 1:
            return list(values)
        t = torch.tensor(values, dtype=torch.float64, device=self._comm_device())
        self._call(torch.distributed.all_reduce, t, op=torch.distributed.ReduceOp.MAX)
        return t.tolist()

    def all_gather_object(self, obj: Any) -> list[Any]:
        if self.world_size == 1:
            return [obj]
        out: list[Any] = [None] * self.world_size
        self._call(torch.distributed.all_gather_object, out, obj)
        return out

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if self.world_size == 1:
            return obj
        box = [obj]
        self._call(torch.distributed.broadcast_object_list, box, src=0)
        return box[0]

    # ---- the leader's commands -----------------------------------------------------------------
    def lead(self, command: str, payload: Any = None) -> None:
        """Leader: tell every follower to enter `command` (their half of the next collective)."""
        if self.world_size > 1:
            self.broadcast_object((command, payload))

    def next_command(self) -> tuple[str, Any]:
        """Follower: wait for the leader's next command."""
        return self.broadcast_object(None)

    def _comm_device(self) -> torch.device:
        return self.device if self.backend == "nccl" else torch.device("cpu")

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        try:
            fn(*args, **kwargs)
        except (RuntimeError, ValueError, ConnectionError) as exc:  # gloo/NCCL report a lost peer as these
            raise RankFailure(f"rank {self.rank}/{self.world_size}: a collective failed ({exc}); another rank "
                              "died or stopped answering. Restart the run with --resume to continue from the "
                              "last checkpoint") from exc

    def close(self, *, drain: bool = False) -> None:
        """Leave the process group. With `drain` (every rank leaving together after "stop") a barrier first
        waits for the collectives still in flight on this rank, so that no rank tears the group down while
        another's background work (FSDP2's gloo reduce-scatters) still uses it: under CPU load such a rank
        aborted at exit ("terminate called without an active exception")."""
        if self.distributed and torch.distributed.is_initialized():
            if drain:
                with contextlib.suppress(Exception):  # a rank already gone: nothing left to wait for
                    torch.distributed.barrier()
            torch.distributed.destroy_process_group()

    def release(self) -> None:
        """Leader, at the end of a run: tell the followers to stop (best effort after a rank failure), leave."""
        try:
            self.lead("stop")
        except RankFailure:
            self.close()
            return
        self.close(drain=True)


def launched_world() -> tuple[int, int, int] | None:
    """(rank, world size, local rank) set by torchrun or the Ray runtime; None when not launched so."""
    if "WORLD_SIZE" not in os.environ or "RANK" not in os.environ:
        return None
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ.get("LOCAL_RANK", 0))


def rank_device(device: str, local_rank: int) -> torch.device:
    """The device rank `local_rank` trains on: cuda:<local_rank> on a GPU node, else the CPU."""
    use_cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if not use_cuda:
        return torch.device("cpu")
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def init_group(strategy: str, world_size: int, device: str, timeout_s: float) -> RankGroup:
    """Join (or create) the trainer's process group for `strategy`; single gets a world of one with no group."""
    launched = launched_world()
    if strategy == "single":
        if launched is not None and launched[1] > 1:
            raise ConfigError(f"strategy: single runs one process but this was launched with WORLD_SIZE="
                              f"{launched[1]}; set strategy: ddp or fsdp2 (and world_size: {launched[1]})")
        return RankGroup()
    rank, world, local = launched if launched is not None else (0, 1, 0)
    if world != world_size:
        how = "torchrun --nproc-per-node N (or runtime: ray)" if launched is None else "the launcher"
        raise ConfigError(f"world_size is {world_size} in the config but {world} process(es) were started; "
                          f"start {world_size} with {how}, or set world_size: {world}")
    dev = rank_device(device, local)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    if not torch.distributed.is_initialized():
        kwargs: dict[str, Any] = {"backend": backend, "timeout": timedelta(seconds=timeout_s)}
        if launched is None:  # a world of one: an in-process store, no sockets
            kwargs.update(store=torch.distributed.HashStore(), rank=0, world_size=1)
        torch.distributed.init_process_group(**kwargs)
        atexit.register(collect_at_exit)
    return RankGroup(rank, world, local, dev, backend)


def collect_at_exit() -> None:
    """Why every process that joins a group collects its garbage at exit (registered with `atexit`).

    An FSDP2 model's modules, hooks and device mesh form reference cycles that outlive the rank's last function
    and keep the process group's C++ objects alive. Left to the interpreter's finalisation, their teardown aborted
    a rank that had finished cleanly ("terminate called without an active exception", exit code -6, so torchrun
    failed the run): 2 of 29 two-rank fsdp2 runs of bench/trainer_ranks.py here, and 2 torchrun tests of one CI
    run. Collected by `atexit` (the rank's frames are gone, the interpreter is still whole): 0 of 40.
    """
    gc.collect()
