"""An env for fault injection in worker processes: the action 'hang' blocks its step forever."""

from __future__ import annotations

import threading

from agentgym.core import AgentEnv


class StuckEnv(AgentEnv):
    """Replies 'ok' to anything; 'hang' never returns; 'done' ends the episode with reward 1."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return "say something", {}

    def step(self, action: str):
        if action == "hang":
            threading.Event().wait()
        done = action == "done"
        return "ok", float(done), done, False, {}
