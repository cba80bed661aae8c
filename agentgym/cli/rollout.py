"""`agentgym rollout` and `agentgym replay`."""

from __future__ import annotations

import asyncio
import functools
import random
import statistics
from collections import Counter

import typer
from rich.table import Table

from agentgym.branch_replay import BranchRequest, branch_episode, recorded_env_kwargs
from agentgym.cli.common import console, guarded, open_store, parse_json_option
from agentgym.collector import Collector, Task
from agentgym.policy.simple import resolve_policy
from agentgym.registration import make, registry
from agentgym.replay import replay as replay_episode
from agentgym.trajectory import Episode, new_id


def register(app: typer.Typer) -> None:
    app.command("rollout")(rollout)
    app.command("replay")(replay)


def pick_tasks(task_ids: list[str], count: int, seed: int) -> list[str | None]:
    """`count` task ids drawn without replacement (cycling when there are fewer), or Nones."""
    if not task_ids:
        return [None] * count
    order = list(task_ids)
    random.Random(seed).shuffle(order)
    return [order[i % len(order)] for i in range(count)]


@guarded
def rollout(
    env_id: str = typer.Argument(..., help="Registered env id, e.g. Maze-v0 (or module:Name-v0)."),
    policy: str = typer.Option("random", "--policy", help="random, solver or scripted:MODULE:FUNC."),
    episodes: int = typer.Option(8, "--episodes", "-n", min=1, help="Number of episodes (rounded up to whole groups)."),
    group_size: int = typer.Option(1, "--group-size", min=1, help="Rollouts per task sharing a group id and seed."),
    store: str = typer.Option("agentgym.db", "--store", help="Store URL: a SQLite path or postgresql://..."),
    env_kwargs: str = typer.Option(None, "--env-kwargs", help="JSON object of keyword arguments for make()."),
    seed: int = typer.Option(0, "--seed", help="Seed of the first group; group g uses seed + g."),
    max_turns: int = typer.Option(None, "--max-turns", min=1, help="Turn limit (default: the env's)."),
    concurrency: int = typer.Option(16, "--concurrency", min=1, help="Episodes in flight at once."),
    run_id: str = typer.Option(None, "--run", help="Run id stored with the episodes (default: a new id)."),
) -> None:
    """Roll out an env with a simple policy through the collector and store every episode."""
    kwargs = parse_json_option(env_kwargs, "--env-kwargs")
    spec = registry[env_id]
    act = resolve_policy(policy, seed=seed)
    db = open_store(store)
    probe = make(spec.id, **kwargs)  # bad kwargs fail here, before any work
    try:
        limit = max_turns or spec.max_turns or getattr(probe.unwrapped, "max_turns", None) or 30
        task_ids = list(probe.unwrapped.task_ids()) if hasattr(probe.unwrapped, "task_ids") else []
    finally:
        probe.close()
    run_id = run_id or f"rollout-{new_id()[:8]}"
    db.log_run(run_id, {"env_id": spec.id, "env_kwargs": kwargs, "policy": policy, "seed": seed})
    groups = -(-episodes // group_size)
    tasks = [Task(task_id=t, seed=seed + g) for g, t in enumerate(pick_tasks(task_ids, groups, seed))]
    factory = functools.partial(make, spec.id, **kwargs)
    # "module:Name-v0" ids are stored as given, so that replay imports the module again
    factory.env_id = env_id if ":" in env_id else spec.id  # type: ignore[attr-defined]
    collector = Collector(factory, act, None, max_turns=limit, concurrency=concurrency, run_id=run_id)
    result = asyncio.run(collector.collect(tasks, group_size=group_size))
    done = result.episodes
    for ep in done:
        ep.metadata.update(env_kwargs=kwargs, max_turns=limit, policy=policy)
    db.put_many(done)
    _summary(done, run_id, db.display_url)


def _summary(done: list[Episode], run_id: str, where: str) -> None:
    table = Table(title=f"run {run_id} -> {where}")
    for col in ("episodes", "success", "mean reward", "mean turns", "status"):
        table.add_column(col)
    statuses = Counter(str(e.status) for e in done)
    success = sum(e.total_reward > 0 for e in done) / len(done)
    table.add_row(str(len(done)), f"{success:.1%}", f"{statistics.fmean(e.total_reward for e in done):.3f}",
                  f"{statistics.fmean(e.num_turns for e in done):.1f}",
                  ", ".join(f"{k}: {v}" for k, v in sorted(statuses.items())))
    console.print(table)


@guarded
def replay(
    episode_id: str = typer.Argument(..., help="Id of a stored episode."),
    store: str = typer.Option(..., "--store", help="Store URL the episode lives in."),
    env_kwargs: str = typer.Option(None, "--env-kwargs", help="JSON keyword arguments for make() (default: registered)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Do not print the turns."),
    from_turn: int = typer.Option(None, "--from-turn", min=0,
                                  help="Branch: replay the actions before this turn, then let --policy play on; "
                                       "stores the continuation as a child episode."),
    policy: str = typer.Option("random", "--policy", help="With --from-turn: random, solver or scripted:MODULE:FUNC."),
    policy_seed: int = typer.Option(0, "--seed", help="With --from-turn: seed of the random policy."),
) -> None:
    """Print an episode turn by turn and re-execute it; exit 1 at the first differing turn.

    With --from-turn T: restore the env to turn T and roll out a new continuation with --policy.
    """
    if from_turn is not None:
        _branch(episode_id, store, from_turn, policy, policy_seed, parse_json_option(env_kwargs, "--env-kwargs"))
        return
    db = open_store(store, create=False)
    episode = db.get(episode_id)
    if not quiet:
        console.rule(f"episode {episode.id}  env {episode.env_id}  task {episode.task_id}  seed {episode.seed}")
        for turn in episode.turns:
            console.print(f"[bold cyan]turn {turn.index} observation[/]\n{turn.observation}", highlight=False)
            console.print(f"[bold green]action[/] {turn.action_text!r}   [bold]reward[/] {turn.reward}"
                          + ("  [red]terminated[/]" if turn.terminated else "")
                          + ("  [yellow]truncated[/]" if turn.truncated else ""), highlight=False)
        console.print(f"status {episode.status}  total reward {episode.total_reward}")
    kwargs = parse_json_option(env_kwargs, "--env-kwargs") if env_kwargs else recorded_env_kwargs(db, episode)
    divergence = replay_episode(episode, env_kwargs=kwargs)
    if divergence is not None:
        console.print(f"[bold red]replay differs[/] at {divergence.describe()}", highlight=False)
        raise typer.Exit(1)
    console.print(f"[bold green]replay matches[/]: {episode.num_turns} turns reproduced exactly")


def _branch(episode_id: str, store: str, from_turn: int, policy: str, seed: int, env_kwargs: dict) -> None:
    """`replay --from-turn`: store a child episode that a new policy continues from turn `from_turn`."""
    db = open_store(store, create=False)
    child = branch_episode(db, BranchRequest(episode_id=episode_id, from_turn=from_turn, policy=policy,
                                             seed=seed, env_kwargs=env_kwargs))
    parent = db.get(episode_id)
    console.print(f"replayed turns 0..{from_turn - 1} of {episode_id} (observations match), then {policy} "
                  f"played {child.num_turns - from_turn} turns", highlight=False)
    console.print(f"child episode [bold]{child.id}[/]: {child.status}, total reward {child.total_reward:g} "
                  f"(parent: {parent.total_reward:g})", highlight=False)
