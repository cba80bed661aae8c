"""Task splits: which tasks of an env are for training, which for held-out evaluation and testing.

An env states its own splits by accepting a ``split`` argument::

    class MyEnv(agentgym.AgentEnv):
        def task_ids(self, split=None):          # None: every task
            ids = [f"map-{i}" for i in range(500)]
            return {"train": ids[:400], "eval": ids[400:450], "test": ids[450:]}.get(split, ids) \
                if split else ids

An env whose ``task_ids()`` takes no ``split`` gets the default: a stable hash split. Each task id
is hashed with the env's name (SHA-256, so the split never depends on the order of `task_ids()`,
on Python's hash seed or on how many tasks there are), and the hash picks the split by the
fractions in `DEFAULT_FRACTIONS` (80% train, 10% eval, 10% test). Adding tasks later never moves
an existing task to another split. An env class may set ``split_fractions`` to change the shares.

    train = task_ids(env, "train")
    held_out = task_ids(env, "eval")
"""

from __future__ import annotations

import hashlib
import inspect
from collections.abc import Mapping
from typing import Any

from agentgym.errors import ConfigError

SPLITS = ("train", "eval", "test")
DEFAULT_FRACTIONS: Mapping[str, float] = {"train": 0.8, "eval": 0.1, "test": 0.1}


def declares_splits(env: Any) -> bool:
    """Whether the env's own `task_ids` takes a `split` argument (the env defines its splits)."""
    method = getattr(env, "task_ids", None)
    if method is None:
        return False
    try:
        return "split" in inspect.signature(method).parameters
    except (TypeError, ValueError):
        return False


def task_ids(env: Any, split: str | None = None) -> list[str]:
    """The task ids of `split` ("train", "eval", "test"; None: all) of `env` (a wrapped env is fine)."""
    inner = getattr(env, "unwrapped", env)
    if split is not None and split not in SPLITS:
        raise ConfigError(f"unknown task split {split!r}; choose one of {', '.join(SPLITS)} (or None for all tasks)")
    if declares_splits(inner):
        return list(inner.task_ids(split=split))
    ids = list(inner.task_ids()) if hasattr(inner, "task_ids") else []
    if split is None:
        return ids
    fractions = getattr(inner, "split_fractions", None) or DEFAULT_FRACTIONS
    salt = type(inner).__name__
    return [t for t in ids if hash_split(t, salt, fractions) == split]


def hash_split(task_id: str, salt: str, fractions: Mapping[str, float] = DEFAULT_FRACTIONS) -> str:
    """The split of one task id: its salted SHA-256 read as a number in [0, 1) against the fractions."""
    _check_fractions(fractions)
    digest = hashlib.sha256(f"{salt}\x00{task_id}".encode()).digest()
    point = int.from_bytes(digest[:8], "big") / 2**64
    edge = 0.0
    for name in SPLITS:
        edge += fractions.get(name, 0.0)
        if point < edge:
            return name
    return SPLITS[-1]


def _check_fractions(fractions: Mapping[str, float]) -> None:
    unknown = set(fractions) - set(SPLITS)
    if unknown or any(v < 0 for v in fractions.values()) or abs(sum(fractions.values()) - 1.0) > 1e-9:
        raise ConfigError(f"split_fractions must give each of {', '.join(SPLITS)} a share >= 0, summing to 1; "
                          f"got {dict(fractions)}")


def check_splits(make_env: Any) -> tuple[bool, str]:
    """Are the env's splits disjoint, inside `task_ids()`, and the same on a second instance?

    `make_env` is a zero-argument factory. Returns (passed, detail) for `agentgym envs check`.
    """
    first, second = make_env(), make_env()
    try:
        every = set(task_ids(first))
        parts = {s: task_ids(first, s) for s in SPLITS}
        again = {s: task_ids(second, s) for s in SPLITS}
    finally:
        first.close()
        second.close()
    if not every:
        return True, "the env lists no task ids (nothing to split)"
    for name, ids in parts.items():
        if len(set(ids)) != len(ids):
            return False, f"split {name!r} lists a task id twice"
        if not set(ids) <= every:
            extra = sorted(set(ids) - every)[:3]
            return False, f"split {name!r} has ids that task_ids() does not list: {extra}"
        if ids != again[name]:
            return False, (f"split {name!r} differs between two instances of the env: make it depend only on the "
                           "env's arguments, not on time or an unseeded random generator")
    names = list(SPLITS)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            both = set(parts[a]) & set(parts[b])
            if both:
                return False, f"splits {a!r} and {b!r} share {len(both)} task ids (e.g. {sorted(both)[0]!r})"
    sizes = ", ".join(f"{s} {len(parts[s])}" for s in SPLITS)
    how = "the env's own" if declares_splits(getattr(first, "unwrapped", first)) else "the default hash split"
    return True, f"{how}: {sizes} of {len(every)} tasks, disjoint and stable"

