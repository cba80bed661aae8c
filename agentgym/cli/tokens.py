"""`agentgym tokens check MODEL_DIR`: is a model's chat template append-only?"""

from __future__ import annotations

import typer

from agentgym.cli.common import console, guarded, print_json

app = typer.Typer(help="Token accounting tools.", no_args_is_help=True)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="tokens")


@app.command("check")
@guarded
def check(
    model_dir: str = typer.Argument(..., help="A model directory or hub name whose tokenizer to check."),
    env_id: str = typer.Option("Maze-v0", "--env", help="Env whose tools and system prompt the conversation uses."),
    no_tools: bool = typer.Option(False, "--no-tools", help="Render without the env's tools."),
    as_json: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Record a scripted multi-turn conversation turn by turn and compare with a fresh tokenization.

    Exit 0 when the template is append-only, 1 otherwise (the first differing
    turn and any documented rewrite that explains it are printed). The
    collector always trains on the ids as sampled.
    """
    from agentgym.context_tokens import check_template
    from agentgym.errors import require
    from agentgym.registration import make

    transformers = require("transformers", extra="train", what="agentgym tokens check")
    tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
    env = make(env_id)
    inner = env.unwrapped
    try:
        result = check_template(tokenizer, tools=None if no_tools else inner.tools(),
                                system_prompt=getattr(inner, "system_prompt", "") or "")
    finally:
        env.close()
    if as_json:
        print_json(result.to_dict())
    else:
        style = "bold green" if result.append_only else "bold red"
        console.print(f"[{style}]{model_dir}[/]: {result.describe()}", highlight=False)
    if not result.append_only:
        raise typer.Exit(1)
