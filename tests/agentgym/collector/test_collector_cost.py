"""Per-episode cost accounting (agentgym.cost): recorded by the collector, stored, summed per run, shown."""

from __future__ import annotations

import urllib.request

from agentgym.collector import Collector, Task
from agentgym.cost import EpisodeCost
from agentgym.store import TrajectoryStore
from tests.helpers.usage import reported


def solver(messages, env):
    """Scripted policy (labelled): the maze's built-in solver."""
    return env.unwrapped.solver_action()


async def test_each_episode_records_its_cost_and_the_run_sums_them(sqlite_url):
    store = TrajectoryStore(sqlite_url)
    # envs in worker processes of their own: their CPU and peak memory are attributed to the episodes
    collector = Collector("Maze-v0", solver, store, progress=False, run_id="costs", env_runtime="process",
                          concurrency=2)
    first = (await collector.collect([Task("easy-1", seed=0)], group_size=2)).episodes
    again = (await collector.collect([Task("easy-2", seed=1)], group_size=2)).episodes
    await collector.aclose()
    costs = [EpisodeCost.from_dict(e.metadata["cost"]) for e in first + again]
    # the split of wall time and the CPU attribution are figures of bench/cost_accounting.py; here: recorded
    for episode, cost in zip(first + again, costs, strict=True):
        assert cost.tokens_out == episode.num_action_tokens
        assert reported(cost.env_cpu_s) and reported(cost.env_peak_mb)  # process workers report usage
    assert [c.env_starts for c in costs] == [1, 1, 0, 0]  # the second group reuses the two idle workers
    totals = store.run_costs("costs")
    assert totals["episodes"] == 4 and totals["env_starts"] == 2
    assert totals["tokens_out"] == sum(c.tokens_out for c in costs)
    assert totals["env_peak_mb"] == max(c.env_peak_mb for c in costs)
    assert store.run_costs("no-such-run")["episodes"] == 0

    from agentgym.viewer.server import BackgroundViewer

    store.log_run("costs", {"env_id": "Maze-v0"})
    with BackgroundViewer(store) as viewer, urllib.request.urlopen(viewer.url + "/runs/costs", timeout=60) as resp:
        html = resp.read().decode()
    assert 'id="cost"' in html and "env CPU s" in html and "4 recorded episodes" in html
