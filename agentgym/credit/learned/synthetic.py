"""Synthetic token-level episodes for smoke tests and benchmarks of the learned credit models.

Labelled synthetic data, not a model of any env: each group has episodes with random prompt and
action token ids; successful episodes (R = 1) carry a marker token in their actions, so a model
can learn to tell them apart. `action_logprobs` are left empty: fill them with the old policy.
"""

from __future__ import annotations

import random

from agentgym.trajectory import Episode, Turn

SUCCESS_MARKER = 7  #: token id that appears in the actions of successful episodes


def synthetic_token_episodes(n_groups: int = 2, group_size: int = 4, n_turns: int = 3, *, prompt_len: int = 5,
                             action_len: int = 3, vocab: int = 400, seed: int = 0) -> list[Episode]:
    """`n_groups * group_size` episodes of `n_turns` turns; half of each group succeeds (R = 1)."""
    rng = random.Random(seed)
    out = []
    for g in range(n_groups):
        for i in range(group_size):
            success = i % 2 == 0
            turns = []
            for t in range(n_turns):
                action = [rng.randrange(10, vocab) for _ in range(action_len)]
                if success:
                    action[rng.randrange(action_len)] = SUCCESS_MARKER
                turns.append(Turn(index=t, prompt_ids=[rng.randrange(10, vocab) for _ in range(prompt_len)],
                                  action_ids=action, state_fingerprint=f"s{t}-{rng.randrange(2)}",
                                  reward=1.0 if success and t == n_turns - 1 else 0.0))
            out.append(Episode(group_id=f"g{g}", task_id=f"task{g}", turns=turns).finish())
    return out
