"""Helpers shared by the CLI modules: error reporting, JSON output, store opening."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from agentgym.errors import AgentGymError

if TYPE_CHECKING:  # the store (SQLAlchemy) is imported where it is used: the CLI starts faster
    from agentgym.store import TrajectoryStore

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print `message` as plain text (its brackets are not rich markup: `agentgym[browser]` stays whole) and exit."""
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


@contextmanager
def user_errors() -> Iterator[None]:
    """Turn agentgym's own errors into a one-line message and exit code 2 (no stack trace)."""
    try:
        yield
    except AgentGymError as exc:
        fail(str(exc))


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, ensure_ascii=False, default=str, indent=2) + "\n")


def open_store(url: str, *, create: bool = True) -> TrajectoryStore:
    from agentgym.store import TrajectoryStore

    with user_errors():
        return TrajectoryStore(url, create=create)


def parse_json_option(value: str | None, option: str) -> dict[str, Any]:
    if not value:
        return {}
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        fail(f"{option} is not valid JSON ({exc.msg} at column {exc.colno}): {value!r}")
    if not isinstance(data, dict):
        fail(f"{option} must be a JSON object like '{{\"key\": 1}}', got {type(data).__name__}")
    return data


def guarded(func: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator form of `user_errors`."""
    import functools

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with user_errors():
            return func(*args, **kwargs)

    return wrapper
