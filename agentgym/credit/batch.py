"""`TurnBatch`: a batch of episodes flattened, in one pass, into the arrays estimators read.

Layout: the turns of all episodes are concatenated in episode order; episode `e` owns the flat
rows `starts[e]:starts[e+1]`. Build the batch once per training batch and hand it to any number of
estimators (`compute_credit` builds one when given episodes).

Shapes: `E` episodes, `T` turns in total, `G` groups, `K` anchor clusters.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import chain
from typing import Any, Literal

import numpy as np

from agentgym.credit.errors import CreditInputError
from agentgym.credit.stats import BackwardLevels, to_hashable
from agentgym.trajectory import Episode

PerTurn = Sequence[Sequence[float]] | np.ndarray


@dataclass(frozen=True, eq=False)
class TurnBatch:
    """Flat arrays over a batch of episodes (see the module docstring for the layout)."""

    episodes: tuple[Episode, ...]  #: the source episodes, in batch order
    group: np.ndarray  #: [E] int64 dense group code of each episode
    group_ids: tuple[str, ...]  #: [G] the `group_id` behind each code
    starts: np.ndarray  #: [E+1] int64 flat offsets; episode e owns rows starts[e]:starts[e+1]
    outcome: np.ndarray  #: [E] float64 `Episode.total_reward` (R_i)
    reward: np.ndarray  #: [T] float64 `Turn.reward` (r_t)
    valid: np.ndarray  #: [T] bool `Turn.valid` (no `error_kind` in info)
    fingerprint: np.ndarray  #: [T] int64 code of `Turn.state_fingerprint` (batch-wide), -1 if missing
    _cache: dict[str, Any] = field(default_factory=dict, repr=False)

    # ---- construction -------------------------------------------------------------------------
    @classmethod
    def from_episodes(cls, episodes: Sequence[Episode]) -> TurnBatch:
        """One pass over `episodes` (each needs a non-empty `group_id`)."""
        episodes = tuple(episodes)
        codes: dict[str, int] = {}
        group = np.fromiter((codes.setdefault(_group_id(ep), len(codes)) for ep in episodes),
                            dtype=np.int64, count=len(episodes))
        lengths = np.fromiter((len(ep.turns) for ep in episodes), dtype=np.int64, count=len(episodes))
        starts = np.zeros(len(episodes) + 1, dtype=np.int64)
        np.cumsum(lengths, out=starts[1:])
        turns = list(chain.from_iterable(ep.turns for ep in episodes))
        return cls(
            episodes=episodes, group=group, group_ids=tuple(codes), starts=starts,
            outcome=np.fromiter((ep.total_reward for ep in episodes), dtype=np.float64, count=len(episodes)),
            reward=np.fromiter((t.reward for t in turns), dtype=np.float64, count=len(turns)),
            valid=np.fromiter((not t.info.get("error_kind") for t in turns), dtype=bool, count=len(turns)),
            fingerprint=_fingerprint_codes([t.state_fingerprint for t in turns]),
        )

    # ---- sizes and derived layout ---------------------------------------------------------------
    @property
    def n_episodes(self) -> int:
        return len(self.episodes)

    @property
    def n_turns(self) -> int:
        return int(self.starts[-1])

    @property
    def n_groups(self) -> int:
        return len(self.group_ids)

    @cached_property
    def lengths(self) -> np.ndarray:
        """[E] turns per episode."""
        return np.diff(self.starts)

    @cached_property
    def episode_of_turn(self) -> np.ndarray:
        """[T] episode index of each flat turn."""
        return np.repeat(np.arange(self.n_episodes), self.lengths)

    @cached_property
    def group_of_turn(self) -> np.ndarray:
        """[T] group code of each flat turn."""
        return np.repeat(self.group, self.lengths)

    @cached_property
    def position(self) -> np.ndarray:
        """[T] 0-based position of each turn inside its episode."""
        return np.arange(self.n_turns) - self.starts[:-1][self.episode_of_turn]

    @cached_property
    def is_last(self) -> np.ndarray:
        """[T] True on each episode's final turn."""
        last = np.zeros(self.n_turns, dtype=bool)
        last[self.starts[1:][self.lengths > 0] - 1] = True
        return last

    @cached_property
    def group_sizes(self) -> np.ndarray:
        """[G] episodes per group."""
        return np.bincount(self.group, minlength=self.n_groups)

    @cached_property
    def backward_levels(self) -> BackwardLevels:
        """Turns grouped by distance to their episode's end (for backward recursions)."""
        return BackwardLevels.build(self.lengths)

    # ---- conversions ----------------------------------------------------------------------------
    def split(self, flat: np.ndarray) -> list[list[float]]:
        """A flat [T] array as one list per episode."""
        values = np.asarray(flat, dtype=np.float64).tolist()
        bounds = self.starts.tolist()
        return [values[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]

    def per_turn(self, data: PerTurn | None, *, name: str, estimator: str, fix: str) -> np.ndarray:
        """Validate and flatten a per-turn input (`[T]` flat array or one sequence per episode)."""
        if data is None:
            raise CreditInputError(f"estimator '{estimator}' needs `{name}` (one value per turn), "
                                   f"and none was given. {fix}")
        if isinstance(data, np.ndarray) and data.ndim == 1:
            flat = data.astype(np.float64, copy=False)
            if len(flat) != self.n_turns:
                raise CreditInputError(f"`{name}` has {len(flat)} values but the batch has {self.n_turns} turns; "
                                       "give one value per turn, flattened in episode order.")
        else:
            flat = self._flatten(data, name)
        if not np.all(np.isfinite(flat)):
            bad = int(np.flatnonzero(~np.isfinite(flat))[0])
            ep = int(self.episode_of_turn[bad])
            raise CreditInputError(f"`{name}` holds a non-finite value ({flat[bad]}) for episode "
                                   f"{self.episodes[ep].id} turn {int(self.position[bad])}; pass finite numbers.")
        return flat

    def _flatten(self, data: Sequence[Sequence[float]], name: str) -> np.ndarray:
        if len(data) != self.n_episodes:
            raise CreditInputError(f"`{name}` has {len(data)} rows but the batch has {self.n_episodes} episodes; "
                                   "give one sequence per episode, in batch order.")
        for e, (row, n) in enumerate(zip(data, self.lengths.tolist(), strict=True)):
            if len(row) != n:
                raise CreditInputError(f"`{name}` row {e} (episode {self.episodes[e].id}) has {len(row)} values "
                                       f"but the episode has {n} turns; give one value per turn.")
        return np.fromiter((v for row in data for v in row), dtype=np.float64, count=self.n_turns)

    def per_episode(self, data: Sequence[float] | np.ndarray | None, *, name: str, estimator: str,
                    fix: str) -> np.ndarray:
        """Validate a per-episode input ([E])."""
        if data is None:
            raise CreditInputError(f"estimator '{estimator}' needs `{name}` (one value per episode). {fix}")
        flat = np.asarray(data, dtype=np.float64)
        if flat.shape != (self.n_episodes,):
            raise CreditInputError(f"`{name}` has shape {flat.shape} but the batch has {self.n_episodes} "
                                   "episodes; give one value per episode.")
        if not np.all(np.isfinite(flat)):
            raise CreditInputError(f"`{name}` holds non-finite values; pass finite numbers.")
        return flat

    def require_fingerprints(self, estimator: str) -> None:
        """Raise `CreditInputError` naming the first turn without a state fingerprint."""
        missing = np.flatnonzero(self.fingerprint < 0)
        if len(missing):
            row = int(missing[0])
            ep = self.episodes[int(self.episode_of_turn[row])]
            raise CreditInputError(
                f"estimator '{estimator}' groups turns by environment state, but episode {ep.id} turn "
                f"{int(self.position[row])} has no state_fingerprint ({len(missing)} of {self.n_turns} turns "
                "lack one). Record `env.state_fingerprint()` per turn in the collector, pass "
                "missing_fingerprint='singleton' to treat such turns as unique states, or use 'grpo'.")

    def state_clusters(self, missing: Literal["error", "singleton"] = "error", *,
                       estimator: str) -> tuple[np.ndarray, int]:
        """Anchor cluster code per turn [T] from (group, state fingerprint), and the cluster count K: the turns
        of one group taken from one environment state (GiGPO's step groups, OPRL's same-state pairs).

        Turns without a fingerprint raise, naming `estimator` (`missing="error"`), or each form their own
        cluster (`"singleton"`). Memoised per batch, once for both modes: with every fingerprint present they
        are the same clusters, and with one missing `"error"` raises before reading them.
        """
        def build() -> tuple[np.ndarray, int]:
            fp = self.fingerprint
            n_fp = int(fp.max()) + 1 if len(fp) else 0
            key = self.group_of_turn * (n_fp + 1) + fp
            absent = fp < 0
            if absent.any():
                key = np.where(absent, -1 - np.arange(len(fp)), key)  # unique negative keys: singletons
            _, codes = np.unique(key, return_inverse=True)
            return codes.astype(np.int64), int(codes.max()) + 1 if len(codes) else 0

        if missing == "error":
            self.require_fingerprints(estimator)
        return self.cached("state_clusters", build)

    def cached(self, key: str, build: Any) -> Any:
        """Memoise derived arrays that depend only on the batch (e.g. anchor clusters)."""
        if key not in self._cache:
            self._cache[key] = build()
        return self._cache[key]


def _group_id(ep: Episode) -> str:
    if not ep.group_id:
        raise CreditInputError(
            f"episode {ep.id} has no group_id; credit assignment compares the rollouts of one task. "
            "Give every rollout of a task the same group_id (the collector does) or set one per episode.")
    return ep.group_id


def _fingerprint_codes(fps: list[Any]) -> np.ndarray:
    """Batch-wide integer codes of fingerprints, in first-appearance order; '' and None become -1."""
    try:
        table: dict[Any, int] = dict.fromkeys(fps)  # unique keys in order, at C speed
    except TypeError:  # unhashable anchors (lists, arrays, dicts)
        fps = [None if fp is None or (isinstance(fp, str) and not fp) else to_hashable(fp) for fp in fps]
        table = dict.fromkeys(fps)
    table.pop("", None)
    table.pop(None, None)
    for code, key in enumerate(table):
        table[key] = code
    table[""] = table[None] = -1
    return np.fromiter(map(table.__getitem__, fps), dtype=np.int64, count=len(fps))
