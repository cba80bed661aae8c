"""The rollout side of weight sync without the disk: receive buckets and load them into a backend.

Two transports, both driven by the trainer (`agentgym.trainer.sync_process_group`,
`agentgym.trainer.sync_shared_memory`) through `agentgym serve`'s endpoints:

- process group: ``join`` makes this process rank N of the trainer's `WeightGroup`
  (in a thread: the group forms when every engine and the trainer are in); each
  ``receive(manifest, version)`` then takes the buckets the trainer broadcasts;
- shared memory (one host): ``from_shared_memory(name, manifest, version)`` reads
  the buckets from the segment the trainer wrote.

Either way the backend gets one state dict (`update_weights`), which it loads
between generation batches under its own lock, dropping its KV caches. A LoRA
run sends only its adapter (``<weight>@lora_A``, ``@lora_B`` and a scaling per
module): the receiver keeps the base weights of the adapted modules from the
first such sync and loads ``W_base + scaling * B @ A``.
"""

from __future__ import annotations

import threading
from typing import Any

from agentgym.errors import ConfigError


class WeightReceiver:
    """Receives weights for `backend` (anything with `update_weights(state, version=)`)."""

    def __init__(self, backend: Any, *, device: str = "cpu"):
        self.backend, self.device = backend, device
        self.group: Any = None
        self._joined = threading.Event()
        self._join_error: BaseException | None = None
        self._lora_base: dict[str, Any] = {}  #: base weights of LoRA-adapted modules, kept at the first adapter

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
        """Take the buckets of one broadcast and load them; returns the backend's new version."""
        import torch

        from agentgym.policy.weight_buckets import Manifest, unpack

        if not self._joined.wait(timeout_s):
            raise ConfigError(f"no weight group formed within {timeout_s:.0f}s: did the trainer start it?")
        if self._join_error is not None or self.group is None:
            raise ConfigError(f"joining the trainer's weight group failed: {self._join_error!r}")
        state: dict[str, Any] = {}
        for bucket in Manifest.from_dict(manifest).buckets:
            flat = torch.empty(bucket.numel, dtype=bucket.torch_dtype, device=self.group.device)
            self.group.broadcast(flat)
            state.update(unpack(bucket, flat))
        return self._load(state, version, lora_scaling)

    # ---- shared memory -------------------------------------------------------------------------
    def from_shared_memory(self, name: str, manifest: dict[str, Any], version: int | None,
                           lora_scaling: dict[str, float] | None = None) -> int:
        """Load the buckets the trainer wrote into shared-memory segment `name`."""
        import torch

        from agentgym.policy.weight_buckets import Manifest, unpack

        segment = attach(name)
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
            state.clear()  # the views into the segment must be gone before it is closed
            segment.close()

    def _load(self, state: dict[str, Any], version: int | None, lora_scaling: dict[str, float] | None) -> int:
        if lora_scaling:
            state = self._merge_adapter(state, lora_scaling)
        return self.backend.update_weights(state, version=version)

    def _merge_adapter(self, state: dict[str, Any], scaling: dict[str, float]) -> dict[str, Any]:
        """Full weights of the adapted modules from an adapter-only state: W_base + scaling * B @ A."""
        import torch

        own = self.backend.model.state_dict()
        merged = {}
        for key, scale in scaling.items():
            if key not in own:
                raise ConfigError(f"the LoRA adapter names {key!r}, which this model does not have")
            if key not in self._lora_base:  # the base weight is copied once, at the first adapter
                self._lora_base[key] = own[key].detach().clone()
            base = self._lora_base[key]
            a, b = state[f"{key}@lora_A"].to(base.device), state[f"{key}@lora_B"].to(base.device)
            with torch.no_grad():  # W + (B @ A) * scaling in one kernel (one parallel region, not three)
                merged[key] = torch.addmm(base, b.to(base.dtype), a.to(base.dtype), alpha=scale)
        return merged


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
