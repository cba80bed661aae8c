"""The env server runs a thread-safe env's fast calls on its event loop, sends slow ones back to a worker thread,
and never runs a proxied env's calls (worker processes, remote envs) on the loop."""

from __future__ import annotations

import threading
import time

from agentgym.envs.maze.env import MazeEnv

from agentgym.runtime import ProcessEnv
from agentgym.runtime.sessions import INLINE_AFTER, SessionManager


class ThreadProbeMaze(MazeEnv):
    """Maze-v0 that records the thread of each step; the action "slow" sleeps 20 ms first."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.step_threads: list[int] = []

    def step(self, action):
        self.step_threads.append(threading.get_ident())
        if action == "slow":
            time.sleep(0.02)
            action = "up"
        return super().step(action)


async def test_fast_steps_go_inline_and_a_slow_one_goes_back_to_a_thread():
    manager = SessionManager(ThreadProbeMaze, max_sessions=2, idle_timeout_s=None)
    session = await manager.open()
    assert session.inlinable
    loop_thread = threading.get_ident()
    await manager.call(session, "reset", [], {"seed": 0, "options": {"task_id": "easy-1"}})
    for _ in range(200):  # a loaded machine may make a step slow now and then: it only delays going inline
        await manager.call(session, "step", ["left"], {})
        if session.runs_inline("step"):
            break
    assert session.runs_inline("step")
    assert set(session.env.step_threads[:INLINE_AFTER]) != {loop_thread}  # the first ones ran in worker threads
    await manager.call(session, "step", ["slow"], {})
    assert session.env.step_threads[-1] == loop_thread and not session.runs_inline("step")
    await manager.call(session, "step", ["left"], {})
    assert session.env.step_threads[-1] != loop_thread
    await manager.close_all()


async def test_proxied_envs_and_the_thread_every_call_setting_never_run_inline():
    proxied = SessionManager(lambda: ProcessEnv("agentgym.envs.maze.env:MazeEnv", env_id="Maze-v0"), max_sessions=1,
                             idle_timeout_s=None)
    off = SessionManager(ThreadProbeMaze, max_sessions=1, idle_timeout_s=None, inline_fast_calls=False)
    for manager in (proxied, off):
        session = await manager.open()
        assert not session.inlinable
        await manager.call(session, "reset", [], {"seed": 0})
        for _ in range(INLINE_AFTER + 2):
            await manager.call(session, "step", ["left"], {})
        assert not session.runs_inline("step")
        await manager.close_all()
