"""Commands that other packages add to `agentgym` through the `agentgym.cli` entry point group.

An entry point names a callable `register(app: typer.Typer) -> None`. The trainer ships
`agentgym train` this way (`train = "agentgym.trainer.cli:register"` in pyproject.toml), which keeps
the light core from importing the trainer. A plugin that fails to load becomes a command that
says why, instead of breaking every other command.
"""

from __future__ import annotations

from importlib.metadata import entry_points

import typer

from agentgym.cli.common import fail

GROUP = "agentgym.cli"
EXPECTED = {"train": "agentgym.trainer.cli:register"}  #: shipped by this distribution


def register_plugins(app: typer.Typer) -> None:
    """Let every `agentgym.cli` entry point add its commands; name the fix for the ones that are missing."""
    found = {ep.name: ep for ep in entry_points(group=GROUP)}
    for name, ep in found.items():
        try:
            ep.load()(app)
        except Exception as exc:  # a broken plugin must not break the other commands
            _explain(app, name, f"its plugin {ep.value} failed to load: {exc!r}")
    for name, target in EXPECTED.items():
        if name not in found:
            _explain(app, name, f"the installed agentgym metadata has no '{GROUP}' entry point '{name} = {target}'; "
                                "reinstall the package (pip install -e . in a checkout)")


def _explain(app: typer.Typer, name: str, reason: str) -> None:
    def unavailable(args: list[str] = typer.Argument(None, hidden=True)) -> None:
        fail(f"agentgym {name} is unavailable: {reason}")

    app.command(name, help=f"(unavailable: {reason})", context_settings={"ignore_unknown_options": True,
                                                                         "allow_extra_args": True})(unavailable)
