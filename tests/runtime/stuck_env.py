"""An env for fault injection in worker processes: the action 'hang' blocks its step forever, 'burn' uses CPU."""

from __future__ import annotations

import threading
import time

from agentgym.core import AgentEnv

BURN_CPU_S = 0.2  #: CPU seconds (process time, not wall time) one 'burn' step makes the env's process use


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
            until = time.process_time() + BURN_CPU_S
            while time.process_time() < until:
                pass
        done = action == "done"
        return "ok", float(done), done, False, {}


def hang_first_policy():
    """Scripted (labelled): the first episode's step hangs its env, every other episode ends at once. Returns the
    policy and the list it appends the hung env's URL to."""
    hung: list[str] = []

    def policy(messages, env):
        if not hung:
            hung.append(env.url)
            return "hang"
        return "done"

    return policy, hung
