"""`agentgym envs list|check`."""

from __future__ import annotations

import typer
from rich.table import Table

from agentgym.checker import check_env_contract
from agentgym.cli.common import console, fail, guarded, parse_json_option, print_json
from agentgym.registration import make, registry

app = typer.Typer(help="List and check registered environments.", no_args_is_help=True)


@app.command("list")
@guarded
def list_envs(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """List every registered env id."""
    specs = [registry[i] for i in registry]
    rows = [{"id": s.id, "gymnasium_id": s.gymnasium_id,
             "entry_point": s.entry_point if isinstance(s.entry_point, str) else repr(s.entry_point),
             "kwargs": s.kwargs, "max_turns": s.max_turns, "description": s.description} for s in specs]
    if as_json:
        print_json(rows)
        return
    table = Table(title="agentgym environments")
    for col in ("id", "entry point", "defaults", "description"):
        table.add_column(col)
    for r in rows:
        table.add_row(r["id"], str(r["entry_point"]), str(r["kwargs"] or ""), r["description"])
    console.print(table)


@app.command("check")
@guarded
def check(
    env_id: str = typer.Argument(..., help="Registered env id, e.g. Maze-v0."),
    env_kwargs: str = typer.Option(None, "--env-kwargs", help="JSON object of keyword arguments for make()."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
) -> None:
    """Run Gymnasium's check_env and agentgym's contract checks on an env."""
    kwargs = parse_json_option(env_kwargs, "--env-kwargs")
    spec = registry[env_id]
    make(spec.id, **kwargs).close()  # fail fast on bad kwargs
    report = check_env_contract(spec.id, lambda: make(spec.id, **kwargs))
    if as_json:
        print_json({"env_id": spec.id, "passed": report.passed,
                    "checks": [r.__dict__ for r in report.results]})
    else:
        table = Table(title=f"envs check {spec.id}")
        for col in ("check", "result", "detail"):
            table.add_column(col)
        for r in report.results:
            mark = "[yellow]skip[/]" if r.skipped else ("[green]pass[/]" if r.passed else "[red]FAIL[/]")
            table.add_row(r.name, mark, r.detail)
        console.print(table)
    if not report.passed:
        fail(f"{spec.id} failed: {', '.join(r.name for r in report.failures())}", code=1)
