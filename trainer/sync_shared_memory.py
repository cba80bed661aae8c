"""Weight sync through shared memory on one host: the trainer writes buckets, `agentgym serve` reads them.

The trainer keeps one `multiprocessing.shared_memory` segment (grown when the
model grows), writes every bucket into it back to back, and tells each engine
its name and the manifest (``POST /agentgym/weights/shm``); the engine keeps
the segment mapped and copies each tensor from it straight into its model (one
memcpy per tensor each side: about 30-65 ms for a 137 MB model on the loaded
2-core development machine). One host only: a server elsewhere cannot open the
segment and says so.
"""

from __future__ import annotations

from typing import Any

import torch
from agentgym.trainer.weight_sync import EngineSync

from agentgym.policy.weight_buckets import DEFAULT_BUCKET_BYTES, copy_into, plan


class SharedMemorySync(EngineSync):
    """`WeightSync` into `agentgym serve` engines on this host, through one shared-memory segment."""

    name = "shared_memory"

    def __init__(self, base_urls: list[str], *, bucket_bytes: int = DEFAULT_BUCKET_BYTES, timeout_s: float = 300.0,
                 backend: Any = None, adapter_only: bool = True):
        super().__init__(base_urls, timeout_s=timeout_s, backend=backend, adapter_only=adapter_only)
        self.bucket_bytes = bucket_bytes
        self.segment: Any = None

    def push_state(self, state: dict[str, torch.Tensor], version: int, *,
                   lora_scaling: dict[str, float] | None = None) -> int:
        manifest = plan(state, self.bucket_bytes)
        segment = self._segment(manifest.nbytes)
        offset = 0
        for bucket in manifest.buckets:  # each tensor straight into the segment: one copy
            view = torch.frombuffer(segment.buf, dtype=torch.uint8, count=bucket.nbytes, offset=offset)
            flat = view.view(bucket.torch_dtype)
            for e in bucket.entries:
                copy_into(flat[e.offset:e.offset + e.numel], state[e.name])
            offset += bucket.nbytes
            del view, flat
        body = {"name": segment.name, "manifest": manifest.to_dict(), "version": version,
                "lora_scaling": lora_scaling}
        versions = [self.post(root, "/agentgym/weights/shm", body)["version"] for root in self.roots]
        return self._loaded(versions, version)

    def _segment(self, nbytes: int) -> Any:
        from multiprocessing import shared_memory

        if self.segment is None or self.segment.size < nbytes:
            self.close()
            self.segment = shared_memory.SharedMemory(create=True, size=max(nbytes, 1))
        return self.segment

    def close(self) -> None:
        """Unlink the segment. An engine keeps its mapping between pushes (mapping it afresh each time faults
        every page in again), so the memory is returned once the engine moves to a new segment or exits."""
        if self.segment is not None:
            self.segment.close()
            self.segment.unlink()
            self.segment = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
