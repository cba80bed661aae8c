"""`agentgym envs list|check|serve`."""

from __future__ import annotations

import typer
from rich.table import Table

from agentgym.checker import check_env_contract
from agentgym.cli.common import console, fail, guarded, parse_json_option, print_json
from agentgym.registration import make, registry
from agentgym.runtime.remote import is_env_url

app = typer.Typer(help="List, check and serve environments.", no_args_is_help=True)


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
    """Run Gymnasium's check_env and agentgym's contract checks on an env (a registered id or a server URL)."""
    kwargs = parse_json_option(env_kwargs, "--env-kwargs")
    checked = env_id if is_env_url(env_id) else registry[env_id].id
    make(checked, **kwargs).close()  # fail fast on bad kwargs or an unreachable server
    report = check_env_contract(checked, lambda: make(checked, **kwargs))
    if as_json:
        print_json({"env_id": checked, "passed": report.passed,
                    "checks": [r.__dict__ for r in report.results]})
    else:
        table = Table(title=f"envs check {checked}")
        for col in ("check", "result", "detail"):
            table.add_column(col)
        for r in report.results:
            mark = "[yellow]skip[/]" if r.skipped else ("[green]pass[/]" if r.passed else "[red]FAIL[/]")
            table.add_row(r.name, mark, r.detail)
        console.print(table)
    if not report.passed:
        fail(f"{checked} failed: {', '.join(r.name for r in report.failures())}", code=1)


@app.command("serve")
@guarded
def serve(
    env_id: str = typer.Argument(..., help="Registered env id, e.g. Maze-v0 (or module:Name-v0)."),
    env_kwargs: str = typer.Option(None, "--env-kwargs", help="JSON object of keyword arguments for make()."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
    port: int = typer.Option(8000, "--port", help="TCP port to listen on."),
    uds: str = typer.Option(None, "--uds", help="Listen on this unix socket instead of a TCP port."),
    max_sessions: int = typer.Option(64, "--max-sessions", min=1, help="Sessions (env instances) at once; "
                                     "more get a 'busy' answer."),
    idle_timeout: float = typer.Option(600.0, "--idle-timeout", min=0.01, help="Close a session idle this long (s)."),
    env_runtime: str = typer.Option("auto", "--env-runtime", help="auto (a worker process per session unless "
                                    "the env is thread_safe), process or thread."),
    call_timeout: float = typer.Option(300.0, "--call-timeout", min=0.01, help="Kill a session's worker process "
                                       "whose call takes longer than this (s)."),
    inline_fast_calls: bool = typer.Option(True, "--inline-fast-calls/--thread-every-call", help="Run a "
                                           "thread-safe env's fast calls on the event loop (default), or every call "
                                           "in a worker thread."),
) -> None:
    """Serve one env over HTTP + WebSocket (protocol: docs/env-protocol.md)."""
    from agentgym.runtime.server import serve as run_server
    from agentgym.runtime.server import server_factory

    kwargs = parse_json_option(env_kwargs, "--env-kwargs")
    spec = registry[env_id]
    factory = server_factory(spec, kwargs, env_runtime, call_timeout)
    where = f"unix socket {uds}" if uds else f"http://{host}:{port}/{spec.id}"
    console.print(f"serving {spec.id} on {where} (max {max_sessions} sessions)", highlight=False)
    run_server(spec.id, factory, host=host, port=port, uds=uds, max_sessions=max_sessions,
               idle_timeout_s=idle_timeout, inline_fast_calls=inline_fast_calls)


@app.command("up")
@guarded
def up(
    env_id: str = typer.Argument(..., help="Registered env id, e.g. SQL-v0."),
    replicas: int = typer.Option(1, "--replicas", min=1, help="Containers to start."),
    env_kwargs: str = typer.Option(None, "--env-kwargs", help="JSON object of keyword arguments for make()."),
    max_sessions: int = typer.Option(64, "--max-sessions", min=1, help="Sessions per replica."),
) -> None:
    """Start an env cluster (env server containers, no network), print its endpoints, keep it up until Ctrl-C.

    The containers stop when this command ends, however it ends (even SIGKILL).
    """
    import time

    from agentgym.runtime.cluster import EnvCluster
    from agentgym.runtime.images import GENERIC, image_for

    spec = registry[env_id]
    kwargs = parse_json_option(env_kwargs, "--env-kwargs")
    family = image_for(spec.id)
    if family == GENERIC:  # bad kwargs fail here, before any container starts; a family image's env may need
        make(spec.id, **kwargs).close()  # what only the image has (Chromium): its container reports them
    console.print(f"starting {replicas} {spec.id} container(s) of image agentgym/{family} (docker/{family}/; "
                  "the first run builds it)...", highlight=False)
    cluster = EnvCluster(spec.id, replicas=replicas, env_kwargs=kwargs, max_sessions=max_sessions).start()
    console.print(f"image {cluster.image}", highlight=False)
    try:
        for endpoint in cluster.endpoints:
            print(endpoint, flush=True)
        console.print("[green]up[/]; Ctrl-C stops the cluster (dead replicas are replaced meanwhile)")
        cluster.watch()
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        cluster.stop()


@app.command("down")
@guarded
def down(env_id: str = typer.Argument(None, help="Only the containers of this env id (default: all).")) -> None:
    """Remove env server containers (left by a crashed owner, or all of them)."""
    from agentgym.runtime.cluster import remove_env_containers

    removed = remove_env_containers(registry[env_id].id if env_id else None)
    console.print(f"removed {len(removed)} env container(s)")
