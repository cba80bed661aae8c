"""A Gymnasium space of arbitrary Unicode text.

Gymnasium's `Text` space restricts strings to a fixed charset (alphanumerics by
default), so it rejects most real model output. `UnicodeText` accepts every
Python `str` up to a length cap, and samples a mix of ASCII, punctuation,
whitespace and non-Latin characters so that `check_env` exercises an env's
handling of garbage actions.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium.spaces import Space

_SAMPLE_ALPHABET = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    " \n\t.,;:!?()[]{}<>\"'`/\\|-_=+*&^%$#@~"
    "éüßçñøåЖжщ中文字日本語한국어αβγδ→∑∞😀🤖"
)


class UnicodeText(Space[str]):
    """Any Unicode string of at most `max_length` characters."""

    def __init__(self, max_length: int = 1_000_000, *, min_length: int = 0, seed: int | None = None):
        if min_length < 0 or max_length < min_length:
            raise ValueError(
                f"UnicodeText needs 0 <= min_length <= max_length, got min_length={min_length}, "
                f"max_length={max_length}"
            )
        self.min_length = int(min_length)
        self.max_length = int(max_length)
        super().__init__(dtype=str, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random string of length <= min(max_length, 64), drawn from a wide alphabet."""
        upper = min(self.max_length, max(self.min_length, 64))
        length = int(self.np_random.integers(self.min_length, upper + 1))
        idx = self.np_random.integers(0, len(_SAMPLE_ALPHABET), size=length)
        return "".join(_SAMPLE_ALPHABET[i] for i in np.asarray(idx, dtype=np.int64))

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def to_jsonable(self, sample_n):
        return list(sample_n)

    def from_jsonable(self, sample_n):
        return list(sample_n)

    def __repr__(self) -> str:
        return f"UnicodeText(min_length={self.min_length}, max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return (
            isinstance(other, UnicodeText)
            and other.min_length == self.min_length
            and other.max_length == self.max_length
        )
