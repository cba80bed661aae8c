"""`agentgym episodes list|export|show|diff`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from agentgym.cli.common import console, guarded, open_store, print_json

if TYPE_CHECKING:  # the store (SQLAlchemy) is imported where it is used: the CLI starts faster
    from agentgym.store import EpisodeFilter

app = typer.Typer(help="Query and export the trajectory store.", no_args_is_help=True)

STORE_OPTION = typer.Option(..., "--store", help="Store URL: a SQLite path or postgresql://user@host/db.")


def _filter(run: str | None, env: str | None, task: str | None, group: str | None, status: str | None,
            failure: str | None, min_reward: float | None, max_reward: float | None) -> EpisodeFilter:
    from agentgym.store import EpisodeFilter

    return EpisodeFilter(run_id=run, env_id=env, task_id=task, group_id=group, status=status, failure=failure,
                         min_reward=min_reward, max_reward=max_reward)


@app.command("list")
@guarded
def list_episodes(
    store: str = STORE_OPTION,
    env: str = typer.Option(None, "--env", help="Only this env id."),
    run: str = typer.Option(None, "--run", help="Only this run id."),
    task: str = typer.Option(None, "--task", help="Only this task id."),
    group: str = typer.Option(None, "--group", help="Only this group id."),
    status: str = typer.Option(None, "--status", help="complete, truncated, error or partial."),
    failure: str = typer.Option(None, "--failure", help="infra, model or none."),
    min_reward: float = typer.Option(None, "--min-reward"),
    max_reward: float = typer.Option(None, "--max-reward"),
    limit: int = typer.Option(50, "--limit", min=1),
    offset: int = typer.Option(0, "--offset", min=0),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """List episodes, newest first."""
    db = open_store(store, create=False)
    flt = _filter(run, env, task, group, status, failure, min_reward, max_reward)
    rows = db.summaries(flt, order_by="created_at", descending=True, limit=limit, offset=offset)
    if as_json:
        print_json(rows)
        return
    table = Table(title=f"{db.count(flt)} episodes in {db.display_url}")
    for col in ("id", "env", "task", "group", "status", "failure", "reward", "turns"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["id"], r["env_id"], r["task_id"], r["group_id"][:12], r["status"], r["failure"] or "",
                      f"{r['total_reward']:.3f}", str(r["num_turns"]))
    console.print(table)


@app.command("export")
@guarded
def export(
    path: Path = typer.Argument(..., help="Output .jsonl file."),
    store: str = STORE_OPTION,
    env: str = typer.Option(None, "--env"),
    run: str = typer.Option(None, "--run"),
    status: str = typer.Option(None, "--status"),
) -> None:
    """Export episodes as JSON lines (readable by datasets.load_dataset("json", ...))."""
    db = open_store(store, create=False)
    count = db.export_jsonl(path, _filter(run, env, None, None, status, None, None, None))
    console.print(f"wrote {count} episodes to {path}")


@app.command("show")
@guarded
def show(
    episode_id: str = typer.Argument(..., help="Id of a stored episode."),
    store: str = STORE_OPTION,
    tokens: bool = typer.Option(False, "--tokens", help="Also print each action token coloured by its log-prob."),
) -> None:
    """Print one episode turn by turn: observations, actions, rewards, token stats and advantages."""
    from agentgym.viewer.queries import run_config
    from agentgym.viewer.terminal import print_episode
    from agentgym.viewer.token_view import find_decoder, model_dir_of

    db = open_store(store, create=False)
    episode = db.get(episode_id)
    decoder = find_decoder(model_dir_of(episode, run_config(db, episode.run_id)))[0] if tokens else None
    print_episode(console, episode, decoder, show_tokens=tokens)


@app.command("diff")
@guarded
def diff(
    episode_a: str = typer.Argument(..., help="Id of the first episode."),
    episode_b: str = typer.Argument(..., help="Id of the second episode."),
    store: str = STORE_OPTION,
) -> None:
    """Show two episodes of one task side by side, turn by turn, with the first divergence marked."""
    from agentgym.cli.common import err_console
    from agentgym.viewer.diff import first_divergence, task_mismatch
    from agentgym.viewer.terminal import diff_table

    db = open_store(store, create=False)
    a, b = db.get(episode_a), db.get(episode_b)
    warning = task_mismatch(a, b)
    if warning:
        err_console.print(f"[yellow]warning:[/] {warning}", highlight=False)
    divergence = first_divergence(a, b)
    console.print(diff_table(a, b, divergence))
    if divergence is None:
        console.print("[green]identical[/]: every turn matches", highlight=False)
    else:
        console.print(f"[bold red]first divergence[/] at {divergence.describe('A', 'B')}", highlight=False)
