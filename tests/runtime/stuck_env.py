"""An env for fault injection in worker processes: the action 'hang' blocks its step forever, 'burn' uses CPU."""

from __future__ import annotations

import threading
import time

from agentgym.core import AgentEnv


class StuckEnv(AgentEnv):
    """Replies 'ok' to anything; 'hang' never returns; 'burn' spins 0.2 CPU seconds; 'done' ends the episode with
    reward 1."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "say something", {}

    def step(self, action: str):
        if action == "hang":
            threading.Event().wait()
        if action == "burn":
            until = time.process_time() + 0.2
            while time.process_time() < until:
                pass
        done = action == "done"
        return "ok", float(done), done, False, {}
