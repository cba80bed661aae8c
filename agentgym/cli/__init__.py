"""The `agentgym` command line: one module per verb group, assembled here."""

from __future__ import annotations

import typer

from agentgym.cli import envs, episodes, rollout, serve, tokens, view

app = typer.Typer(
    name="agentgym",
    help="Train LLM agents with RL on multi-turn environments: envs, rollouts, episodes, replay.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.add_typer(envs.app, name="envs")
app.add_typer(episodes.app, name="episodes")
rollout.register(app)
__import__("agentgym.cli.train", fromlist=["register"]).register(app)
serve.register(app)
tokens.register(app)
view.register(app)


def _optional_groups() -> None:
    """Verb groups whose modules may be absent in a partial install."""
    import importlib

    for module, name, attr in (("agentgym.cli.sandbox", "sandbox", "sandbox_app"),):
        try:
            sub = getattr(importlib.import_module(module), attr)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise
            continue
        app.add_typer(sub, name=name)


_optional_groups()


def main() -> None:
    app()
