"""A scripted (labelled) success predictor for TRACE tests: p_hat looked up by the branch point's state."""

from __future__ import annotations

import numpy as np


class TablePredictor:
    """Scripted predictor: p_hat by the state fingerprint of the prefix's next turn (`default` otherwise)."""

    n_seen = 10**9  #: past any warm-up: the allocator trusts it

    def __init__(self, table: dict[str | None, float], default: float = 0.0):
        self.table, self.default = table, default

    def predict(self, prefixes):
        return np.array([self.table.get(p.next_turn.state_fingerprint if p.next_turn else None, self.default)
                         for p in prefixes])

    def update(self, prefixes, labels):
        return 0.0

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass
