"""Browser-v0 under the collector: concurrent episodes in one process, and a crashed page ending only its episode."""

from __future__ import annotations

import asyncio

from agentgym.collector import Collector, Task
from agentgym.trajectory import EpisodeStatus, Failure

CRASH_TASK = "shop/easy/003"


async def _crash(page) -> None:
    cdp = await page.context.new_cdp_session(page)
    try:
        await asyncio.wait_for(cdp.send("Page.crash"), 2)
    except Exception:
        pass


def crashing_solver(messages, env):
    """Scripted policy (labelled): the env's solver, except that it crashes one task's page at its third turn."""
    inner = env.unwrapped
    if inner._run.task_id == CRASH_TASK and inner._turn == 2:
        inner.driver.call(_crash(inner._session.page), timeout_s=30)
    return inner.solver_action()


async def test_concurrent_episodes_complete_and_a_crashed_page_is_an_infra_failure_of_its_episode_only():
    tasks = [Task(f"shop/easy/{i:03d}", seed=i) for i in range(6)]
    collector = Collector("Browser-v0", crashing_solver, concurrency=4, progress=False,
                          env_kwargs={"sites": ["shop"]})
    episodes = (await collector.collect(tasks)).episodes
    await collector.aclose()
    by_task = {e.task_id: e for e in episodes}
    assert len(by_task) == 6
    crashed = by_task.pop(CRASH_TASK)
    assert crashed.failure == Failure.INFRA and crashed.status in (EpisodeStatus.TRUNCATED, EpisodeStatus.ERROR)
    assert "page crashed" in crashed.error
    assert all(e.status == EpisodeStatus.COMPLETE and e.total_reward == 1.0 for e in by_task.values()), [
        (e.task_id, e.status, e.error) for e in by_task.values()]
