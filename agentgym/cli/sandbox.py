"""`agentgym sandbox build|ls|reap`: images and live sandbox containers."""

from __future__ import annotations

import typer

from agentgym.cli.common import console, fail, print_json

sandbox_app = typer.Typer(
    help="Build sandbox images (no registry needed) and inspect or reap sandbox containers.",
    no_args_is_help=True,
)


@sandbox_app.command("build")
def build(
    image: str = typer.Argument(None, help="Env image name under docker/ (e.g. example), or 'base'; default: all."),
    force: bool = typer.Option(False, "--force", help="Rebuild even when the content hash is already built."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
) -> None:
    """Build the base image (if missing) and env images, cached by content hash."""
    from agentgym.sandboxes import images
    from agentgym.sandboxes.errors import SandboxError

    try:
        built_base = images.ensure_base(force=force and image == "base")
        names = [] if image == "base" else ([image] if image else list(images.env_images()))
        results = [images.build(name, force=force) for name in names]
    except SandboxError as exc:
        fail(str(exc))
    rows = [{"image": images.BASE_IMAGE, "cached": not built_base}]
    rows += [{"image": r.tag, "cached": r.cached} for r in results]
    if as_json:
        print_json(rows)
        return
    for row in rows:
        console.print(f"{row['image']}: {'up to date' if row['cached'] else 'built'}", highlight=False)


@sandbox_app.command("ls")
def list_sandboxes(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text.")) -> None:
    """List sandbox containers with their owning process and whether it is alive."""
    from agentgym.sandboxes import docker, reaper
    from agentgym.sandboxes.errors import SandboxError

    try:
        api = docker.client().api
    except SandboxError as exc:
        fail(str(exc))
    rows = [
        {"id": c["Id"][:12], "image": c["Image"], "status": c["Status"],
         "owner_pid": c["Labels"].get("agentgym.owner_pid"), "owner_alive": reaper.owner_alive(c["Labels"])}
        for c in api.containers(all=True, filters={"label": reaper.LABEL})
    ]
    if as_json:
        print_json(rows)
        return
    for r in rows:
        console.print(f"{r['id']} {r['image']} {r['status']} owner={r['owner_pid']} alive={r['owner_alive']}",
                      highlight=False)


@sandbox_app.command("reap")
def reap() -> None:
    """Remove sandbox containers whose owning process is gone."""
    from agentgym.sandboxes import docker, reaper
    from agentgym.sandboxes.errors import SandboxError

    try:
        removed = reaper.reap_orphans(docker.client())
    except SandboxError as exc:
        fail(str(exc))
    console.print(f"removed {len(removed)} orphaned sandbox container(s)", highlight=False)
