"""Cost accounting benchmark: do an episode's stored seconds add up, and is the env's CPU attributed to it?

    python bench/cost_accounting.py           # a table
    python bench/cost_accounting.py --json    # one JSON object

Measured in one run, as ratios (these machines are noisy; the tests check only that the figures are recorded):

(a) the wall-time split: Maze-v0 in worker processes (`env_runtime="process"`), the maze's solver as a scripted
    policy (labelled); per episode `wall_s` against `policy_s + env_s + queue_s`. `split_residual` is the largest
    |wall - sum| / wall over the episodes (0 when the split accounts for every second).
(b) env CPU attribution through a served env: bench/burn_env.py's env behind `EnvServer` with sessions in
    worker processes, a scripted policy (labelled) that burns a known CPU time twice per episode; `cpu_attributed`
    is the stored `env_cpu_s` summed over the run divided by the CPU the policy made the envs burn (>= 1: the
    worker's own work counts too; below 1 CPU went missing).
(c) the peak memory stored per run: `maze_peak_mb` for (a)'s worker processes, `burn_peak_mb` for (b)'s served
    workers (a Python worker is tens of MB; a figure near 0 means the usage hook read the wrong process).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentgym.collector import Collector, Task  # noqa: E402
from agentgym.cost import EpisodeCost  # noqa: E402
from agentgym.runtime.placement import process_factory  # noqa: E402
from agentgym.runtime.server import ServerThread  # noqa: E402
from agentgym.store import TrajectoryStore  # noqa: E402
from bench.burn_env import BURN_CPU_S, BurnEnv  # noqa: E402

BURNS_PER_EPISODE = 2


def solver(messages, env):
    """Scripted policy (labelled): the maze's built-in solver."""
    return env.unwrapped.solver_action()


def burning(messages, env):
    """Scripted policy (labelled): burn CPU in the env on the first two turns, then finish."""
    return "burn" if len(messages) < 1 + 2 * BURNS_PER_EPISODE else "done"


async def split_residual(store: TrajectoryStore, episodes: int) -> float:
    collector = Collector("Maze-v0", solver, store, progress=False, run_id="split", env_runtime="process",
                          concurrency=2)
    tasks = [Task(f"easy-{i}", seed=i) for i in range(episodes // 2)]
    done = (await collector.collect(tasks, group_size=2)).episodes
    await collector.aclose()
    costs = [EpisodeCost.from_dict(e.metadata["cost"]) for e in done]
    return max(abs(c.wall_s - (c.policy_s + c.env_s + c.queue_s)) / max(c.wall_s, 1e-9) for c in costs)


async def cpu_attributed(store: TrajectoryStore, episodes: int) -> float:
    server = ServerThread("Burn-v0", process_factory(BurnEnv, "Burn-v0", None), max_sessions=4)
    try:
        collector = Collector(server.url, burning, store, turn_timeout_s=30, concurrency=2, progress=False,
                              run_id="burn")
        await collector.collect([Task(seed=i) for i in range(episodes // 2)], group_size=2)
        await collector.aclose()
    finally:
        server.stop()
    return store.run_costs("burn")["env_cpu_s"] / (episodes * BURNS_PER_EPISODE * BURN_CPU_S)


async def measure(episodes: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="agentgym-cost-") as tmp:
        store = TrajectoryStore(str(Path(tmp) / "costs.db"))
        return {"episodes": episodes, "split_residual": await split_residual(store, episodes),
                "cpu_attributed": await cpu_attributed(store, episodes),  # the runs are stored by now
                "maze_peak_mb": store.run_costs("split")["env_peak_mb"],
                "burn_peak_mb": store.run_costs("burn")["env_peak_mb"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=8, help="episodes per measurement (even)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.episodes < 2 or args.episodes % 2:
        parser.error("--episodes must be an even number >= 2")
    figures = asyncio.run(measure(args.episodes))
    if args.json:
        print(json.dumps(figures))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"cost accounting, {args.episodes} episodes per measurement")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_column("meaning")
    table.add_row("split_residual", f"{figures['split_residual']:.5f}", "max |wall - (policy+env+queue)| / wall")
    table.add_row("cpu_attributed", f"{figures['cpu_attributed']:.2f}", "stored env CPU / CPU the envs were made to burn")
    table.add_row("maze_peak_mb", f"{figures['maze_peak_mb']:.1f}", "largest stored env peak MB, Maze-v0 workers")
    table.add_row("burn_peak_mb", f"{figures['burn_peak_mb']:.1f}", "largest stored env peak MB, served workers")
    Console().print(table)


if __name__ == "__main__":
    main()
