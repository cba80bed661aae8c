"""An env whose 'burn' step spends a known amount of CPU (process time): the yardstick of bench/cost_accounting.py.

tests/runtime/stuck_env.py has the same 'burn' and adds 'hang'; it stays self-contained because it is mounted
alone into env server containers, where neither `bench` nor `tests` can be imported.
"""

from __future__ import annotations

import time

from agentgym.core import AgentEnv

BURN_CPU_S = 0.2  #: CPU seconds (process time, not wall time) one 'burn' step uses in the env's process


class BurnEnv(AgentEnv):
    """'burn' spins BURN_CPU_S of CPU; 'done' ends the episode with reward 1; anything else replies 'ok'."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "say something", {}

    def step(self, action: str):
        if action == "burn":
            until = time.process_time() + BURN_CPU_S
            while time.process_time() < until:
                pass
        done = action == "done"
        return "ok", float(done), done, False, {}
