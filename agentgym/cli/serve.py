"""`agentgym serve MODEL_DIR --port P`: the hf backend as an OpenAI-compatible server."""

from __future__ import annotations

import typer

from agentgym.cli.common import console, guarded


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


@guarded
def serve(
    model_dir: str = typer.Argument(..., help="A model directory (save_pretrained layout) or a hub name."),
    port: int = typer.Option(8000, "--port", "-p", min=1, max=65535, help="TCP port to listen on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (0.0.0.0 exposes it to the network)."),
    device: str = typer.Option(None, "--device", help="torch device, e.g. cpu or cuda:0 (default: cpu)."),
    name: str = typer.Option(None, "--name", help="Model id reported by /v1/models (default: the directory name)."),
    max_batch_size: int = typer.Option(64, "--max-batch-size", min=1, help="Requests batched into one forward."),
) -> None:
    """Serve a model with /v1/completions and /v1/chat/completions (with log-probs)."""
    from agentgym.policy.serve import serve as run_server

    console.print(f"agentgym serve: {model_dir} on http://{host}:{port}/v1", highlight=False)
    run_server(model_dir, host=host, port=port, device=device, name=name, max_batch_size=max_batch_size)
