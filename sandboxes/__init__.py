"""Isolated sandboxes for model-written commands.

    from agentgym import sandboxes

    with sandboxes.open("agentgym/base:bookworm") as sb:
        result = sb.exec("echo hello")          # ExecResult(exit_code=0, stdout="hello\n", ...)

    pool = sandboxes.Pool("agentgym/base:bookworm", size=8)
    with pool.lease() as sb:                      # reset to a clean state when returned
        sb.exec(["python3", "-c", "print(1)"])

Backends: "docker" (the real isolation), "local" (bubblewrap, weaker; see
sandboxes/README.md), "inline" (slots of an env server's own family
container, see sandboxes/inline.py) and "auto". Importing this package imports neither the
Docker SDK nor anything outside the standard library.
"""

from agentgym.sandboxes.backends import default_backend, open
from agentgym.sandboxes.errors import (
    AgentError,
    BackendUnavailable,
    ImageNotFound,
    SandboxClosed,
    SandboxError,
)
from agentgym.sandboxes.images import BASE_IMAGE
from agentgym.sandboxes.limits import Limits
from agentgym.sandboxes.pool import Pool
from agentgym.sandboxes.privileges import Privileges
from agentgym.sandboxes.result import ExecResult
from agentgym.sandboxes.sandbox import Sandbox, Snapshot

__all__ = [
    "BASE_IMAGE",
    "AgentError",
    "BackendUnavailable",
    "ExecResult",
    "ImageNotFound",
    "Limits",
    "Pool",
    "Privileges",
    "Sandbox",
    "SandboxClosed",
    "SandboxError",
    "Snapshot",
    "default_backend",
    "open",
]
