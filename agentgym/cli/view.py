"""`agentgym view`: serve the trajectory viewer over a store."""

from __future__ import annotations

import socket

import typer

from agentgym.cli.common import console, fail, guarded, open_store
from agentgym.errors import require


def register(app: typer.Typer) -> None:
    app.command("view")(view)


@guarded
def view(
    store: str = typer.Option(..., "--store", help="Store URL: a SQLite path or postgresql://user@host/db."),
    port: int = typer.Option(8765, "--port", min=0, max=65535, help="TCP port (0: any free port)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (default: loopback only)."),
) -> None:
    """Browse runs, tasks, groups and episodes (turns, tokens, advantages) in a local web app."""
    require("fastapi", extra="serve", what="agentgym view")
    require("uvicorn", extra="serve", what="agentgym view")
    require("jinja2", extra="serve", what="agentgym view")
    from agentgym.viewer.server import free_port, serve

    db = open_store(store, create=False)
    port = port or free_port(host)
    _check_port(host, port)
    if host not in ("127.0.0.1", "localhost", "::1"):
        console.print(f"[yellow]warning:[/] listening on {host}: anyone who can reach it can read the store "
                      "and start replays", highlight=False)
    console.print(f"agentgym viewer for {db.display_url} at [bold]http://{host}:{port}[/] (Ctrl+C to stop)",
                  highlight=False)
    serve(db, host=host, port=port)


def _check_port(host: str, port: int) -> None:
    """Fail with one line (not uvicorn's log and exit) when the port cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}; pick another --port")
