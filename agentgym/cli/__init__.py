"""The `agentgym` command line: one module per verb group, assembled here.

Heavy dependencies (torch, docker, fastapi) are imported inside the commands
that need them, so `agentgym --help` stays fast on a light install. Packages add
commands through the `agentgym.cli` entry point group (`agentgym train` comes from
`agentgym.trainer.cli` that way), so the core never imports the trainer.
"""

from __future__ import annotations

import typer

from agentgym.cli import envs, episodes, eval, plugins, rollout, sandbox, serve, tokens, view

app = typer.Typer(
    name="agentgym",
    help="Train LLM agents with RL on multi-turn environments: envs, rollouts, training, episodes, replay.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)
app.add_typer(envs.app, name="envs")
app.add_typer(episodes.app, name="episodes")
app.add_typer(sandbox.sandbox_app, name="sandbox")
for group in (rollout, serve, tokens, view, eval):
    group.register(app)
plugins.register_plugins(app)


def main() -> None:
    app()
