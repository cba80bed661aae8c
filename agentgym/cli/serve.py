"""`agentgym serve MODEL_DIR --port P`: the hf backend as an OpenAI-compatible server."""

from __future__ import annotations

import typer

from agentgym.cli.common import console, guarded


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)


@guarded
def serve(
    model_dir: str = typer.Argument(..., help="A model directory (save_pretrained layout), a hub name, or a training "
                                              "run's checkpoint: runs/NAME@latest, @update-N, @sft."),
    port: int = typer.Option(8000, "--port", "-p", min=1, max=65535, help="TCP port to listen on."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind (0.0.0.0 exposes it to the network)."),
    device: str = typer.Option(None, "--device", help="torch device, e.g. cpu or cuda:0 (default: cpu)."),
    name: str = typer.Option(None, "--name", help="Model id reported by /v1/models (default: the directory name)."),
    max_batch_size: int = typer.Option(64, "--max-batch-size", min=1, help="Requests batched into one forward."),
) -> None:
    """Serve a model with /v1/completions and /v1/chat/completions (with log-probs)."""
    from agentgym.policy.checkpoints import locate_model
    from agentgym.policy.serve import serve as run_server
    from agentgym.policy.spec import parse_policy

    spec = parse_policy(model_dir if model_dir.startswith("hf:") else f"hf:{model_dir}")
    location = locate_model(spec.target, spec.ref)
    if location.run_dir is not None:
        name = name or f"{location.run_dir.name}@{spec.ref or 'latest'}"
        console.print(f"checkpoint {location.checkpoint} of {location.run_dir}", highlight=False)
    model_dir = location.path
    console.print(f"agentgym serve: {model_dir} on http://{host}:{port}/v1", highlight=False)
    run_server(model_dir, host=host, port=port, device=device, name=name, max_batch_size=max_batch_size)
