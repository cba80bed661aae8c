"""TRACE success-probability predictors: p_hat(h) for a prefix h of a rollout tree.

- `BetaPosterior`: root-only fallback (MoPPS), one Beta(a, b) per task with decay lambda:
  `a <- lambda*a + s`, `b <- lambda*b + (k - s)`, `p_hat = a / (a + b)`.
- `PrefixPredictor`: a small shared logistic model over hashed prefix features (task, state
  fingerprint at the branch point, words of the observation there, depth, reward and invalid
  actions so far), trained online with binary cross-entropy on (prefix, final outcome) pairs.
  numpy only; `agentgym.credit.learned.LMSuccessPredictor` is the tiny-LM alternative.
- `MixPredictor`: the same model trained on realised branch points instead: the probability that
  the recorded path through a node and k new continuations from it do not all end alike. A
  success predictor pools many states into one p_hat; where the policy is nearly deterministic
  each state's own p is near 0 or 1, so `I_k(p_hat)` overstates how often a branch compares
  anything (E[I(p)] <= I(E[p])). Trained on what branches actually gave, it does not.

Any object with `predict(prefixes) -> [N] probabilities` and `update(prefixes, labels) -> loss`
(the `SuccessPredictor` protocol) can drive `TraceAllocator`.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from agentgym.trajectory import Turn


@dataclass(frozen=True)
class Prefix:
    """The history h of a tree node: the task, the turns taken so far, and the state reached."""

    task_key: str  #: the root (task) this prefix grows from
    turns: tuple[Turn, ...]  #: the turns taken so far (k = len(turns))
    next_turn: Turn | None = None  #: the turn taken next on the recorded path (its observation/fingerprint describe the state)
    outcome: float | None = None  #: success label of the recorded path through this state (`MixPredictor` only)
    path_len: int = 0  #: turns of the recorded path through this state (`MixPredictor` only)

    @property
    def depth(self) -> int:
        return len(self.turns)


class SuccessPredictor(Protocol):
    """Predicts the probability that a rollout continued from a prefix succeeds."""

    def predict(self, prefixes: Sequence[Prefix]) -> np.ndarray: ...

    def update(self, prefixes: Sequence[Prefix], labels: np.ndarray) -> float: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class BetaPosterior:
    """One Beta(a, b) per task key, with exponential decay of old evidence."""

    def __init__(self, prior_a: float = 1.0, prior_b: float = 1.0, decay: float = 1.0):
        if prior_a <= 0 or prior_b <= 0 or not 0 < decay <= 1:
            raise ValueError(f"BetaPosterior needs prior_a, prior_b > 0 and decay in (0, 1]; got "
                             f"prior_a={prior_a}, prior_b={prior_b}, decay={decay}.")
        self.prior_a, self.prior_b, self.decay = prior_a, prior_b, decay
        self.params: dict[str, tuple[float, float]] = {}

    def mean(self, key: str) -> float:
        a, b = self.params.get(key, (self.prior_a, self.prior_b))
        return a / (a + b)

    def update(self, key: str, successes: float, trials: float) -> None:
        a, b = self.params.get(key, (self.prior_a, self.prior_b))
        self.params[key] = (self.decay * a + successes, self.decay * b + (trials - successes))

    def state_dict(self) -> dict[str, Any]:
        return {"prior": [self.prior_a, self.prior_b], "decay": self.decay,
                "params": {k: list(v) for k, v in self.params.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.prior_a, self.prior_b = state["prior"]
        self.decay = state["decay"]
        self.params = {k: (float(a), float(b)) for k, (a, b) in state["params"].items()}


def _bucket(hashes: list[int], name: str, n_features: int) -> None:
    hashes.append(zlib.crc32(name.encode("utf-8", "replace")) % n_features)


class PrefixPredictor:
    """Logistic regression over hashed prefix features, trained online by SGD on BCE."""

    def __init__(self, n_features: int = 4096, lr: float = 0.2, l2: float = 1e-4, max_words: int = 64):
        if n_features < 16 or lr <= 0 or l2 < 0:
            raise ValueError(f"PrefixPredictor needs n_features >= 16, lr > 0, l2 >= 0; got "
                             f"n_features={n_features}, lr={lr}, l2={l2}.")
        self.n_features, self.lr, self.l2, self.max_words = n_features, lr, l2, max_words
        self.weights = np.zeros(n_features)
        self.bias = 0.0
        self.n_seen = 0

    def features(self, prefix: Prefix) -> np.ndarray:
        """Hashed feature indices of one prefix (binary features)."""
        out: list[int] = []
        n = self.n_features
        _bucket(out, f"task={prefix.task_key}", n)
        _bucket(out, f"depth={min(prefix.depth, 32)}", n)
        _bucket(out, f"task={prefix.task_key}|depth={min(prefix.depth, 32)}", n)
        invalid = sum(1 for t in prefix.turns if not t.valid)
        _bucket(out, f"invalid={min(invalid, 5)}", n)
        reward = sum(t.reward for t in prefix.turns)
        _bucket(out, f"reward={round(reward, 1)}", n)
        if prefix.turns:
            _bucket(out, f"last_valid={prefix.turns[-1].valid}", n)
        nxt = prefix.next_turn
        if nxt is not None:
            if nxt.state_fingerprint:
                _bucket(out, f"fp={nxt.state_fingerprint}", n)
                _bucket(out, f"task={prefix.task_key}|fp={nxt.state_fingerprint}", n)
            for word in nxt.observation.lower().split()[: self.max_words]:
                _bucket(out, f"w={word}", n)
        return np.unique(np.asarray(out, dtype=np.int64))

    def _logits(self, feats: list[np.ndarray]) -> np.ndarray:
        return np.array([self.bias + self.weights[f].sum() for f in feats])

    def predict(self, prefixes: Sequence[Prefix]) -> np.ndarray:
        """[N] success probabilities."""
        return _sigmoid(self._logits([self.features(p) for p in prefixes]))

    def update(self, prefixes: Sequence[Prefix], labels: np.ndarray, epochs: int = 1) -> float:
        """SGD on BCE over (prefix, label in [0, 1]) pairs; returns the mean loss before the update."""
        feats = [self.features(p) for p in prefixes]
        labels = np.clip(np.asarray(labels, dtype=np.float64), 0.0, 1.0)
        if not feats:
            return 0.0
        p = _sigmoid(self._logits(feats))
        loss = float(np.mean(-labels * np.log(p + 1e-12) - (1 - labels) * np.log(1 - p + 1e-12)))
        for _ in range(epochs):
            for f, y in zip(feats, labels.tolist(), strict=True):
                err = _sigmoid(self.bias + self.weights[f].sum()) - y
                step = self.lr / math.sqrt(len(f) + 1)
                self.weights[f] -= step * (err + self.l2 * self.weights[f])
                self.bias -= step * err
        self.n_seen += len(feats)
        return loss

    def state_dict(self) -> dict[str, Any]:
        return {"n_features": self.n_features, "weights": self.weights.copy(), "bias": self.bias,
                "n_seen": self.n_seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["n_features"] != self.n_features:
            raise ValueError(f"checkpoint has n_features={state['n_features']} but this predictor has "
                             f"{self.n_features}; build it with the same n_features.")
        self.weights = np.asarray(state["weights"], dtype=np.float64).copy()
        self.bias, self.n_seen = float(state["bias"]), int(state["n_seen"])


class MixPredictor(PrefixPredictor):
    """P(mixed outcomes) at a node: `PrefixPredictor`'s features plus the recorded path's outcome and the
    turns it took after the node (known when planning, so they may be read)."""

    def features(self, prefix: Prefix) -> np.ndarray:
        out = list(super().features(prefix))
        n = self.n_features
        if prefix.outcome is not None:
            _bucket(out, f"outcome={round(prefix.outcome, 1)}", n)
            _bucket(out, f"outcome={round(prefix.outcome, 1)}|depth={min(prefix.depth, 32)}", n)
        _bucket(out, f"left={min(max(prefix.path_len - prefix.depth, 0), 32)}", n)
        return np.unique(np.asarray(out, dtype=np.int64))


def _sigmoid(x: np.ndarray | float) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -60, 60)))
