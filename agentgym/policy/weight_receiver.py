"""The rollout side of weight sync without the disk: receive buckets and load them into a backend.

Two transports, both driven by the trainer (`agentgym.trainer.sync_process_group`,
`agentgym.trainer.sync_shared_memory`) through `agentgym serve`'s endpoints:

- process group: ``join`` makes this process rank N of the trainer's `WeightGroup`
  (in a thread: the group forms when every engine and the trainer are in); each
  ``receive(manifest, version)`` then takes the buckets the trainer broadcasts;
- shared memory (one host): ``from_shared_memory(name, manifest, version)`` reads
  the buckets from the segment the trainer wrote.

Either way the backend gets one state dict (`update_weights`), which it copies
into the model in place between generation batches under its own lock, dropping
its KV caches. A LoRA run sends only its adapter (``<weight>@lora_A``, ``@lora_B``
and a scaling per module): the receiver keeps the base weights of the adapted
modules from the first such sync and writes ``W_base + scaling * B @ A`` straight
into the model's weights (`edit_weights`, under the same lock).

What a push costs on the receiving side, and why (a profile of `bench/weight_sync.py`):
the buckets are received into host memory kept between pushes (CPU) and the
shared-memory segment stays attached while the trainer keeps it (a fresh
allocation or mapping faults the whole model's pages in again); every host copy
is one memcpy (`weight_buckets.copy_into`).
"""

from __future__ import annotations

import threading
from typing import Any

from agentgym.errors import ConfigError


class WeightReceiver:
    """Receives weights for `backend` (anything with `update_weights(state, version=)` and
    `edit_weights(edit, version=)`, as `HFBackend`)."""

    def __init__(self, backend: Any, *, device: str = "cpu"):
        self.backend, self.device = backend, device
        self.group: Any = None
        self._joined = threading.Event()
        self._join_error: BaseException | None = None
        self._lora_base: dict[str, Any] = {}  #: base weights of LoRA-adapted modules, kept at the first adapter
        self._arena: Any = None  #: host memory the buckets are received into, kept between pushes (CPU only)
        self._segment: Any = None  #: the trainer's shared-memory segment, kept attached between pushes

    # ---- process group -------------------------------------------------------------------------
    def join(self, host: str, port: int, rank: int, world_size: int, backend: str = "gloo",
             timeout_s: float = 300.0) -> None:
        """Start joining the trainer's weight group (returns at once; `receive` waits for it)."""
        from agentgym.policy.weight_group import WeightGroup

        self._joined.clear()
        self._join_error = None

        def build() -> None:
            try:
                self.group = WeightGroup(host, port, rank, world_size, backend=backend, timeout_s=timeout_s,
                                         device=self.device).connect()
            except BaseException as exc:  # reported by the next receive
                self._join_error = exc
            finally:
                self._joined.set()

        threading.Thread(target=build, name="weight-group-join", daemon=True).start()

    def receive(self, manifest: dict[str, Any], version: int | None, timeout_s: float = 300.0,
                lora_scaling: dict[str, float] | None = None) -> int:
        """Take the buckets of one broadcast and load them; returns the backend's new version.

        Every bucket's receive is posted at once (gloo/NCCL fill them in order in the background); a full
        push is then copied into the model bucket by bucket as each one lands, under the backend's lock, so
        the copy of bucket i overlaps the transfer of bucket i+1."""
        from agentgym.policy.weight_buckets import Manifest, unpack

        if not self._joined.wait(timeout_s):
            raise ConfigError(f"no weight group formed within {timeout_s:.0f}s: did the trainer start it?")
        if self._join_error is not None or self.group is None:
            raise ConfigError(f"joining the trainer's weight group failed: {self._join_error!r}")
        buckets = Manifest.from_dict(manifest).buckets
        arena, offset, landing = self._receive_arena(sum(_aligned(b.nbytes) for b in buckets)), 0, []
        for bucket in buckets:
            flat = arena[offset:offset + bucket.nbytes].view(bucket.torch_dtype)
            landing.append((bucket, flat, self.group.broadcast(flat, async_op=True)))
            offset += _aligned(bucket.nbytes)
        if lora_scaling:  # an adapter: small; merged once all of it is here
            state: dict[str, Any] = {}
            for bucket, flat, work in landing:
                work.wait()
                state.update(unpack(bucket, flat))
            return self._load(state, version, lora_scaling)
        return self.backend.edit_weights(lambda model: _copy_as_received(model, landing), version=version)

    def _receive_arena(self, nbytes: int) -> Any:
        """Bytes to receive one push into. On a CPU the same memory serves every push (a fresh allocation
        would cost the kernel's page faults over the whole model each time); on a GPU a fresh one from the
        caching allocator (free to take, and no model-sized block held between pushes)."""
        import torch

        device = self.group.device
        if device.type != "cpu":
            return torch.empty(nbytes, dtype=torch.uint8, device=device)
        if self._arena is None or self._arena.numel() < nbytes:
            self._arena = None
            self._arena = torch.empty(nbytes, dtype=torch.uint8)
        return self._arena

    # ---- shared memory -------------------------------------------------------------------------
    def from_shared_memory(self, name: str, manifest: dict[str, Any], version: int | None,
                           lora_scaling: dict[str, float] | None = None) -> int:
        """Load the buckets the trainer wrote into shared-memory segment `name`."""
        import torch

        from agentgym.policy.weight_buckets import Manifest, unpack

        segment = self._attached(name)
        state: dict[str, Any] = {}
        try:
            offset = 0
            for bucket in Manifest.from_dict(manifest).buckets:  # views into the segment: no copy before loading
                raw = torch.frombuffer(segment.buf, dtype=torch.uint8, count=bucket.nbytes, offset=offset)
                state.update(unpack(bucket, raw.view(bucket.torch_dtype)))
                offset += bucket.nbytes
                del raw
            return self._load(state, version, lora_scaling)
        finally:
            state.clear()  # no view into the segment outlives the load (it may be closed at the next push)

    def _attached(self, name: str) -> Any:
        """The segment called `name`, attached once and kept while the trainer keeps writing into it (mapping
        it afresh every push would fault its pages in again); a new name (the trainer's model grew) closes
        the old one."""
        if self._segment is not None and self._segment.name == name:
            return self._segment
        if self._segment is not None:
            self._segment.close()
            self._segment = None
        self._segment = attach(name)
        return self._segment

    def _load(self, state: dict[str, Any], version: int | None, lora_scaling: dict[str, float] | None) -> int:
        if lora_scaling:
            return self.backend.edit_weights(lambda model: self._merge_adapter(model, state, lora_scaling),
                                             version=version)
        return self.backend.update_weights(state, version=version)

    def _merge_adapter(self, model: Any, state: dict[str, Any], scaling: dict[str, float]) -> None:
        """Write W_base + scaling * B @ A into each adapted weight of `model`, from an adapter-only state.

        Straight into the weight (`addmm(..., out=)`, one kernel): no merged copy is allocated and then
        copied in. Runs under the backend's lock (`edit_weights`), between generation batches."""
        import torch

        from agentgym.policy.weight_buckets import one_thread

        own = model.state_dict()
        missing = sorted(key for key in scaling if key not in own)
        if missing:
            raise ConfigError(f"the LoRA adapter names {missing[:3]}, which this model does not have")
        with one_thread():
            for key, scale in scaling.items():
                if key not in self._lora_base:  # the base weight is copied once, at the first adapter
                    self._lora_base[key] = own[key].detach().clone()
                base = self._lora_base[key]
                a = state[f"{key}@lora_A"].to(base.device, base.dtype)
                b = state[f"{key}@lora_B"].to(base.device, base.dtype)
                torch.addmm(base, b, a, alpha=scale, out=own[key])


def _copy_as_received(model: Any, landing: list[tuple[Any, Any, Any]]) -> None:
    """Copy each (bucket, flat, pending receive) into `model`'s weights once its receive completes.

    The names and shapes are checked against the model first; on a mismatch every receive is still waited
    for (the trainer is sending them) before the error."""
    from agentgym.policy.weight_buckets import copy_into, one_thread, unpack

    own = model.state_dict()
    wrong = [f"{e.name} {e.shape}" for bucket, _, _ in landing for e in bucket.entries
             if e.name not in own or list(own[e.name].shape) != e.shape]
    if wrong:
        for _, _, work in landing:
            work.wait()
        raise ConfigError(f"the trainer pushed {len(wrong)} tensors this model does not have (name and shape), "
                          f"e.g. {wrong[:3]}; the engine must serve the policy's base model")
    with one_thread():
        for bucket, flat, work in landing:
            work.wait()
            for name, tensor in unpack(bucket, flat):
                copy_into(own[name], tensor)


def _aligned(nbytes: int, to: int = 64) -> int:
    """`nbytes` rounded up so that the next bucket starts aligned for any dtype."""
    return -(-nbytes // to) * to


def attach(name: str) -> Any:
    """Open an existing shared-memory segment without adopting it (the trainer owns and unlinks it)."""
    from multiprocessing import resource_tracker, shared_memory

    try:
        segment = shared_memory.SharedMemory(name=name)
    except FileNotFoundError:
        raise ConfigError(f"shared-memory segment {name!r} does not exist: shared-memory weight sync needs the "
                          "trainer and the server on one host; use weight_sync: process_group otherwise") from None
    resource_tracker.unregister(segment._name, "shared_memory")  # not ours to unlink at exit
    return segment
