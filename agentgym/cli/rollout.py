"""`agentgym rollout` and `agentgym replay`."""

from __future__ import annotations

import asyncio
import random
import statistics
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from agentgym.branching import BranchPlan, branch, recorded_env_kwargs
from agentgym.cli.common import console, guarded, open_store, parse_json_option
from agentgym.cli.policy_options import POLICY_HELP, PolicyFlags, with_policy_flags
from agentgym.collector import Collector, Task
from agentgym.policy.checkpoints import RunProfile
from agentgym.policy.loading import PolicyOptions, open_policy
from agentgym.policy.spec import PolicySpec, parse_policy
from agentgym.registration import make, registry, resolve_turn_limit, turn_limit
from agentgym.replay import replay as replay_episode
from agentgym.trajectory import Episode, first_difference, new_id

if TYPE_CHECKING:  # the store (SQLAlchemy) is imported where it is used: the CLI starts faster
    from agentgym.store import TrajectoryStore


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
@with_policy_flags()
def rollout(
    env_id: str = typer.Argument(..., help="Registered env id, e.g. Maze-v0 (or module:Name-v0)."),
    policy: str = typer.Option("random", "--policy", help=POLICY_HELP),
    episodes: int = typer.Option(8, "--episodes", "-n", min=1, help="Number of episodes (rounded up to whole groups)."),
    group_size: int = typer.Option(1, "--group-size", min=1, help="Rollouts per task sharing a group id and seed."),
    store: str = typer.Option("agentgym.db", "--store", help="Store URL: a SQLite path or postgresql://..."),
    env_kwargs: str = typer.Option(None, "--env-kwargs", help="JSON object of keyword arguments for make()."),
    seed: int = typer.Option(0, "--seed", help="Seed of the first group; group g uses seed + g."),
    max_turns: int = typer.Option(None, "--max-turns", min=1, help="Turn limit (default: the run's, else the env's)."),
    concurrency: int = typer.Option(16, "--concurrency", min=1, help="Episodes in flight at once."),
    run_id: str = typer.Option(None, "--run", help="Run id stored with the episodes (default: a new id)."),
    *,
    flags: PolicyFlags,
) -> None:
    """Roll out an env with any policy through the collector and store every episode."""
    kwargs = parse_json_option(env_kwargs, "--env-kwargs")
    spec = registry[env_id]
    parsed = parse_policy(policy)
    db = open_store(store)
    plan = RolloutPlan(env_id, spec.id, kwargs, max_turns, episodes, group_size, seed, concurrency,
                       run_id or f"rollout-{new_id()[:8]}", flags.collector_settings())
    done = asyncio.run(_rollout(plan, parsed, flags.options(seed), db))
    _summary(done, plan.run_id, db.display_url)


@dataclass
class RolloutPlan:
    """What `agentgym rollout` was asked to do."""

    env_arg: str  #: the env id as given ("module:Name-v0" ids are stored as given so replay imports the module)
    env_id: str  #: the registered id
    env_kwargs: dict
    max_turns: int | None
    episodes: int
    group_size: int
    seed: int
    concurrency: int
    run_id: str
    context: dict  #: collector settings: context_window, episode_token_budget


async def _rollout(plan: RolloutPlan, parsed: PolicySpec, options: PolicyOptions, db: TrajectoryStore) -> list[Episode]:
    opened = await open_policy(parsed, options)
    try:
        kwargs, limit, task_ids = env_defaults(plan.env_id, plan.env_kwargs, plan.max_turns, opened.profile)
        db.log_run(plan.run_id, {"env_id": plan.env_id, "env_kwargs": kwargs, "policy": parsed.text,
                                 "seed": plan.seed, "sampling": opened.record()["sampling"]})
        groups = -(-plan.episodes // plan.group_size)
        tasks = [Task(task_id=t, seed=plan.seed + g) for g, t in enumerate(pick_tasks(task_ids, groups, plan.seed))]
        # envs not declared thread_safe run one per worker process; "module:Name-v0" ids are stored as given
        collector = Collector(plan.env_arg, opened.backend, None, tokenizer=opened.prompt_tokenizer,
                              env_kwargs=kwargs, max_turns=limit, sampling=opened.sampling,
                              concurrency=plan.concurrency, run_id=plan.run_id, **plan.context)
        try:
            result = await collector.collect(tasks, group_size=plan.group_size)
        finally:
            await collector.aclose()
        done = result.episodes
        for ep in done:
            ep.metadata.update(env_kwargs=kwargs, max_turns=limit, policy=opened.record())
        db.put_many(done)
        return done
    finally:
        await opened.aclose()


def env_defaults(env_id: str, kwargs: dict, max_turns: int | None,
                 profile: RunProfile | None) -> tuple[dict, int, list[str]]:
    """(env kwargs, turn limit, task ids): the flags, else the training run's (same env), else the env's.

    Makes a probe env, so bad kwargs fail here, before any episode.
    """
    same_env = profile is not None and profile.env and registry.canonical(profile.env) == env_id
    if same_env and not kwargs:
        kwargs = dict(profile.env_kwargs)
    probe = make(env_id, **kwargs)
    try:
        limit = resolve_turn_limit(max_turns, profile.max_turns if same_env else None, turn_limit(env_id, probe))
        task_ids = list(probe.unwrapped.task_ids()) if hasattr(probe.unwrapped, "task_ids") else []
    finally:
        probe.close()
    return kwargs, limit, task_ids


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
@with_policy_flags(context=False)
def replay(
    episode_id: str = typer.Argument(..., help="Id of a stored episode."),
    store: str = typer.Option(..., "--store", help="Store URL the episode lives in."),
    env_kwargs: str = typer.Option(None, "--env-kwargs", help="JSON keyword arguments for make() (default: registered)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Do not print the turns."),
    from_turn: int = typer.Option(None, "--from-turn", min=0,
                                  help="Branch: replay the actions before this turn, then let --policy play on; "
                                       "stores each continuation as a child episode."),
    policy: str = typer.Option("random", "--policy", help=f"With --from-turn: {POLICY_HELP}"),
    branches: int = typer.Option(1, "--branches", "-n", min=1, help="With --from-turn: continuations to store."),
    policy_seed: int = typer.Option(0, "--seed", help="With --from-turn: seed of the policy (branch i uses seed + i)."),
    *,
    flags: PolicyFlags,
) -> None:
    """Print an episode turn by turn and re-execute it; exit 1 at the first differing turn.

    With --from-turn T: restore the env to turn T and store -n continuations played by --policy.
    """
    if from_turn is not None:
        options = flags.options(policy_seed)
        request = BranchPlan(episode_id=episode_id, from_turn=from_turn, policy=policy, seed=policy_seed,
                                env_kwargs=parse_json_option(env_kwargs, "--env-kwargs"))
        _branch(store, request, branches, options)
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


def _branch(store: str, plan: BranchPlan, k: int, options: PolicyOptions) -> None:
    """`replay --from-turn`: store `k` child episodes that a policy continues from turn `plan.from_turn`."""
    db = open_store(store, create=False)
    parent = db.get(plan.episode_id)
    children = asyncio.run(_branches(db, plan, options, k))
    console.print(f"replayed turns 0..{plan.from_turn - 1} of {parent.id} (every turn matches the record), then "
                  f"{plan.policy} played {k} continuation{'s' if k != 1 else ''}", highlight=False)
    table = Table(title=f"branches of {parent.id} at turn {plan.from_turn} (parent reward {parent.total_reward:g})")
    for col in ("child episode", "status", "reward", "turns", "differs from parent at"):
        table.add_column(col)
    for child in children:
        differs = first_difference(parent.turns, child.turns, fields=("action_text",))
        table.add_row(child.id, str(child.status), f"{child.total_reward:g}", str(child.num_turns),
                      "none" if differs is None else f"turn {differs.turn}")
    console.print(table)
    for child in children:  # whole ids, for copying, whatever the terminal's width
        console.print(f"stored child episode {child.id}", highlight=False)


async def _branches(db: TrajectoryStore, plan: BranchPlan, options: PolicyOptions, k: int) -> list[Episode]:
    opened = await open_policy(plan.policy, options)
    try:
        return await branch(db, plan, opened, k)
    finally:
        await opened.aclose()
