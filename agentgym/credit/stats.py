"""Vectorised statistics over flat, segmented arrays: the numeric core every estimator shares.

Conventions (docs/algorithms.md, section 1): `std` is the unbiased (N-1) standard deviation; a value is
normalised as `(x - mean) / (std + eps)` with `eps = 1e-6`; a segment of one element normalises to
0. Segments are dense integer codes `0..n-1` (a group, an anchor cluster, ...).

Exactness: every segment is centred on one of its own members before the mean is taken, so a
segment whose values are all equal gives exactly 0 (not a rounding residue divided by `eps`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

EPS = 1e-6
Norm = Literal["std", "mean"]


@dataclass(frozen=True, eq=False)
class SegmentStats:
    """Per-segment location and scale of a flat array.

    Shapes: `ref`, `offset`, `std`, `count` are `[n_segments]`. The segment mean is
    `ref + offset` (kept apart for exactness, see the module docstring).
    """

    ref: np.ndarray  #: one member of each segment
    offset: np.ndarray  #: mean of (value - ref) over the segment
    std: np.ndarray  #: unbiased standard deviation (0 for segments of one)
    count: np.ndarray  #: number of members

    def with_std_floor(self, floor: float) -> SegmentStats:
        """The same statistics with every std raised to at least `floor` (a spread below it keeps its own scale
        when normalised)."""
        return dataclasses.replace(self, std=np.maximum(self.std, floor))

    @property
    def mean(self) -> np.ndarray:
        return self.ref + self.offset

    def center(self, values: np.ndarray, seg: np.ndarray) -> np.ndarray:
        """`values - mean[seg]`, exactly 0 where a value equals an all-equal segment's members."""
        return (values - self.ref[seg]) - self.offset[seg]

    def normalise(self, values: np.ndarray, seg: np.ndarray, norm: Norm = "std", eps: float = EPS) -> np.ndarray:
        """`(values - mean)` or `(values - mean) / (std + eps)`; 0 for segments of one member."""
        centered = self.center(values, seg)
        if norm == "std":
            centered = centered / (self.std[seg] + eps)
        return np.where(self.count[seg] > 1, centered, 0.0)


def segment_stats(values: np.ndarray, seg: np.ndarray, n_segments: int) -> SegmentStats:
    """Mean and unbiased std of `values` [N] per segment `seg` [N] (codes in `0..n_segments-1`)."""
    values = np.asarray(values, dtype=np.float64)
    count = np.bincount(seg, minlength=n_segments)
    ref = np.zeros(n_segments)
    ref[seg] = values  # any member will do: duplicates keep one of them
    shifted = values - ref[seg]
    safe = np.maximum(count, 1)
    offset = np.bincount(seg, weights=shifted, minlength=n_segments) / safe
    dev = shifted - offset[seg]
    var = np.bincount(seg, weights=dev * dev, minlength=n_segments) / np.maximum(count - 1, 1)
    std = np.where(count > 1, np.sqrt(var), 0.0)
    return SegmentStats(ref=ref, offset=offset, std=std, count=count)


@dataclass(frozen=True, eq=False)
class BackwardLevels:
    """Turn indices of a flat episode layout grouped by distance from their episode's end.

    `levels[k]` holds the flat indices of every turn that is `k` turns before its episode's last
    turn, so a backward recursion over all episodes runs as one vectorised step per level.
    """

    levels: tuple[np.ndarray, ...]

    @classmethod
    def build(cls, lengths: np.ndarray) -> BackwardLevels:
        """From episode lengths [E] of a contiguous flat layout."""
        lengths = np.asarray(lengths, dtype=np.int64)
        total = int(lengths.sum())
        if total == 0:
            return cls(levels=())
        ends = np.cumsum(lengths)
        episode_of = np.repeat(np.arange(len(lengths)), lengths)
        to_end = ends[episode_of] - 1 - np.arange(total)
        if int(lengths.max()) <= np.iinfo(np.uint16).max:
            to_end = to_end.astype(np.uint16)  # the stable sort of 16-bit keys is a radix sort
        order = np.argsort(to_end, kind="stable")
        bounds = np.cumsum(np.bincount(to_end))
        return cls(levels=tuple(np.split(order, bounds[:-1])))


def discounted_cumsum(values: np.ndarray, discount: float, levels: BackwardLevels) -> np.ndarray:
    """`out[t] = values[t] + discount * out[t+1]` inside each episode, `out[last] = values[last]`.

    Shapes: `values` [T] in the flat layout `levels` was built for; returns [T] float64.
    """
    out = np.array(values, dtype=np.float64, copy=True)
    for idx in levels.levels[1:]:
        out[idx] += discount * out[idx + 1]
    return out


def to_hashable(obj: Any) -> Hashable:
    """A hashable key for an anchor observation (GiGPO `to_hashable`).

    Scalars and strings as-is; arrays -> (shape, flattened tuple); lists/tuples -> tuple;
    dicts -> sorted tuple of items; sets -> sorted tuple.
    """
    if isinstance(obj, np.ndarray):
        return ("ndarray", obj.shape, tuple(obj.ravel().tolist()))
    if isinstance(obj, dict):
        return tuple(sorted((to_hashable(k), to_hashable(v)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return tuple(to_hashable(v) for v in obj)
    if isinstance(obj, (set, frozenset)):
        return tuple(sorted(to_hashable(v) for v in obj))
    hash(obj)
    return obj


def informativeness(p: np.ndarray | float, k: int) -> np.ndarray | float:
    """TRACE `I_k(p) = 1 - p^k - (1-p)^k`: the chance that k continuations have mixed outcomes."""
    p = np.clip(p, 0.0, 1.0)
    return 1.0 - p**k - (1.0 - p) ** k
