"""A state dict as a few flat buffers ("buckets") and a manifest that says how to cut them back up.

Weight sync without the disk moves buckets, not one message per tensor: tensors
are grouped by dtype, in state-dict order, into buffers of at most
`bucket_bytes` (a tensor larger than that gets a bucket of its own), so a
transport does a handful of large transfers. The manifest is plain JSON
(names, shapes, dtypes and byte offsets); the receiver allocates the same
buffers, fills them, and views tensors out of them without copying.

Every host-memory copy on the sync path goes through `copy_into`, a plain memcpy: torch's own
`copy_` splits a large CPU copy over its intra-op threads, and on a machine whose cores are busy
(a trainer and an engine sharing a host) each such parallel region waits for a core to come free:
a 140 MB state dict took 0.15-0.45 s with 2 threads on a loaded 2-core host, against 10-20 ms as
one memcpy, which is bound by memory bandwidth anyway.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

DEFAULT_BUCKET_BYTES = 256 << 20


@dataclass
class Entry:
    name: str
    shape: list[int]
    offset: int  #: in elements, inside the bucket
    numel: int


@dataclass
class Bucket:
    dtype: str  #: e.g. "float32", "bfloat16"
    numel: int
    entries: list[Entry] = field(default_factory=list)

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)

    @property
    def nbytes(self) -> int:
        return self.numel * torch.empty((), dtype=self.torch_dtype).element_size()


@dataclass
class Manifest:
    """How buckets map back to named tensors (JSON-able: `to_dict` / `from_dict`)."""

    buckets: list[Bucket]

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self.buckets)

    def to_dict(self) -> dict[str, Any]:
        return {"buckets": [asdict(b) for b in self.buckets]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Manifest:
        return cls([Bucket(b["dtype"], b["numel"], [Entry(**e) for e in b["entries"]]) for b in data["buckets"]])


def plan(state: Mapping[str, torch.Tensor], bucket_bytes: int = DEFAULT_BUCKET_BYTES) -> Manifest:
    """Group `state`'s tensors by dtype into buckets of at most `bucket_bytes`."""
    open_: dict[torch.dtype, Bucket] = {}
    done: list[Bucket] = []
    for name, t in state.items():
        b = open_.get(t.dtype)
        if b is not None and (b.numel + t.numel()) * t.element_size() > bucket_bytes:
            done.append(open_.pop(t.dtype))
            b = None
        if b is None:
            b = open_[t.dtype] = Bucket(str(t.dtype).removeprefix("torch."), 0)
        b.entries.append(Entry(name, list(t.shape), b.numel, t.numel()))
        b.numel += t.numel()
    return Manifest(done + list(open_.values()))


def pack(state: Mapping[str, torch.Tensor], manifest: Manifest, device: torch.device | str = "cpu",
         buffers: BufferPool | None = None) -> Iterator[torch.Tensor]:
    """The flat buffer of each bucket, in manifest order; from `buffers` when given, so that repeated pushes
    reuse their memory (consecutive buckets get alternate slots: send bucket i before asking for bucket i+2)."""
    for i, b in enumerate(manifest.buckets):
        flat = (buffers.get(b, device, slot=i % 2) if buffers is not None
                else torch.empty(b.numel, dtype=b.torch_dtype, device=device))
        for e in b.entries:
            copy_into(flat[e.offset:e.offset + e.numel], state[e.name])
        yield flat


def copy_into(dst: torch.Tensor, src: torch.Tensor) -> None:
    """``dst[...] = src`` (same number of elements): one memcpy when both are contiguous host tensors of one
    dtype, else torch's `copy_` (devices, dtype conversions, strided views)."""
    src = src.detach()
    if (dst.device.type == "cpu" and src.device.type == "cpu" and dst.dtype == src.dtype and dst.numel() > 0
            and dst.is_contiguous() and src.is_contiguous() and dst.numel() == src.numel()):
        out = dst.detach().reshape(-1).view(torch.uint8).numpy()
        out[...] = src.reshape(-1).view(torch.uint8).numpy()  # numpy's copy: a memcpy, no thread pool
        return
    with torch.no_grad():
        dst.copy_(src.reshape(dst.shape))


@contextmanager
def one_thread() -> Iterator[None]:
    """torch's intra-op threads set to 1 for the block, then restored: for loading weights on a CPU.

    The kernels of a load (a dtype conversion, a rank-r LoRA merge) are bound by memory, not arithmetic, so
    more threads add little; but each is a parallel region that waits for every thread to get a core, and on
    a host whose cores are busy (a trainer beside the engine) that wait dominates: the merges of a 137 MB
    model took 0.05-0.8 s with 2 threads on a loaded 2-core host, 30 ms with one. Call it under the
    backend's lock: the count is per thread for OpenMP but process-wide for MKL, and no generation may run
    meanwhile.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


class BufferPool:
    """Two flat send buffers per (dtype, device), each as large as the largest bucket so far, kept between pushes.

    A fresh `torch.empty` for every bucket of every push costs the kernel's page faults each time on a CPU.
    The sender fills bucket i+1 while bucket i is still on its way (`pack` alternates the two slots, and the
    sender waits for a bucket's broadcast before it refills that slot), so at most two buckets of memory per
    dtype are kept.
    """

    def __init__(self) -> None:
        self._buffers: dict[tuple[str, str, int], torch.Tensor] = {}

    def get(self, bucket: Bucket, device: torch.device | str, slot: int = 0) -> torch.Tensor:
        key = (bucket.dtype, str(device), slot)
        flat = self._buffers.get(key)
        if flat is None or flat.numel() < bucket.numel:
            flat = self._buffers[key] = torch.empty(bucket.numel, dtype=bucket.torch_dtype, device=device)
        return flat[:bucket.numel]

    @property
    def nbytes(self) -> int:
        """Bytes held (at most two of the largest bucket of each dtype)."""
        return sum(t.numel() * t.element_size() for t in self._buffers.values())


def unpack(bucket: Bucket, flat: torch.Tensor) -> Iterable[tuple[str, torch.Tensor]]:
    """(name, tensor) views into a received bucket."""
    for e in bucket.entries:
        yield e.name, flat[e.offset:e.offset + e.numel].view(e.shape)


def digest(state: Mapping[str, torch.Tensor]) -> str:
    """sha256 over names and bytes in name order: equal digests mean equal weights."""
    h = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().to("cpu").contiguous()
        h.update(name.encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()
