"""`open()`: pick a backend and start a sandbox."""

from __future__ import annotations

import logging
import os
from typing import Literal

from agentgym.sandboxes.errors import BackendUnavailable
from agentgym.sandboxes.limits import Limits
from agentgym.sandboxes.privileges import Privileges
from agentgym.sandboxes.sandbox import Sandbox

log = logging.getLogger("sandboxes")

Backend = Literal["docker", "local", "inline", "auto"]
BACKENDS = ("docker", "local", "inline", "auto")
#: A family image (docker/code/) sets this to "inline": its env server is inside the container already.
BACKEND_ENV = "AGENTGYM_SANDBOX_BACKEND"


def default_backend(fallback: str = "docker") -> str:
    """The backend an env uses when none is given: $AGENTGYM_SANDBOX_BACKEND, else `fallback`."""
    chosen = os.environ.get(BACKEND_ENV) or fallback
    if chosen not in BACKENDS:
        raise ValueError(f"{BACKEND_ENV}={chosen!r} is unknown; choose one of {', '.join(BACKENDS)}")
    return chosen


def choose_backend(backend: str = "auto") -> str:
    """Resolve "auto" to "docker" when an engine answers, else "local" (logged, as it is weaker)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r} is unknown; choose one of {', '.join(BACKENDS)}")
    if backend != "auto":
        return backend
    from agentgym.sandboxes import docker

    if docker.engine_available():
        log.info("sandboxes: backend='auto' chose 'docker' (an engine answers)")
        return "docker"
    from agentgym.sandboxes import local

    reason = local.unavailable_reason()
    if reason is not None:
        raise BackendUnavailable(
            f"backend='auto' found neither a Docker engine ({docker.ENGINE_HINT}) nor a usable bwrap ({reason})"
        )
    log.warning("sandboxes: backend='auto' chose 'local' (no Docker engine); local isolation is weaker, "
                "see sandboxes/README.md")
    return "local"


def open(  # noqa: A001 - the public name is sandboxes.open
    image: str,
    *,
    backend: Backend = "docker",
    limits: Limits | None = None,
    network: bool = False,
    workdir: str = "/work",
    privileges: Privileges | None = None,
) -> Sandbox:
    """Start a sandbox of `image` and return it once its agent answers.

    `backend="auto"` uses Docker when an engine answers and bubblewrap
    otherwise; the choice is logged and kept in `Sandbox.backend`.
    `backend="inline"` is for an env server inside its family container
    (`sandboxes.inline`): commands run under a slot uid of that container and
    `Sandbox.workdir` is the slot's workspace, not `workdir`.
    `network=True` is the only way to give a sandbox a network and must be
    asked for explicitly. `workdir` becomes a size-limited tmpfs.
    `privileges=Privileges.container_root()` runs the agent as root inside the
    container with a few in-container capabilities (Docker backend only; see
    `sandboxes.privileges`).
    """
    limits = Limits() if limits is None else limits
    if not workdir.startswith("/") or workdir.rstrip("/") in ("", "/usr", "/etc", "/proc", "/dev", "/sys"):
        raise ValueError(f"workdir={workdir!r} must be an absolute path to a fresh directory such as /work")
    chosen = choose_backend(backend)
    if chosen == "inline":
        from agentgym.sandboxes.inline import open_inline

        return open_inline(image, limits=limits, network=network, workdir=workdir, privileges=privileges)
    if chosen == "docker":
        from agentgym.sandboxes.docker import open_docker

        return open_docker(image, limits=limits, network=network, workdir=workdir, privileges=privileges)
    if privileges is not None and not privileges.is_default:
        raise BackendUnavailable(f"privileges={privileges} need the Docker backend; the local (bwrap) backend "
                                 "only runs uid 1000 without capabilities. Start a Docker engine "
                                 "(bash scripts/docker.sh) and use backend='docker'.")
    from agentgym.sandboxes.local import open_local

    return open_local(image, limits=limits, network=network, workdir=workdir)
