"""Who a sandbox's commands run as: the unprivileged default, or root inside the container.

Model-written code runs as uid 1000 with every capability dropped. Some envs
need more *inside* their container: SRE-v0 starts a small system whose
supervisor drops services to their own user and whose operator (the model)
restarts, kills and edits them as root. `Privileges.container_root()` gives
uid 0 with the handful of capabilities that ownership and signals inside the
container need. All of them are in Docker's own default set, none reaches
outside the container (no SYS_ADMIN, NET_*, SYS_PTRACE, MKNOD,
DAC_READ_SEARCH, SYS_CHROOT), and every other default stays on: read-only
root filesystem, no network, no-new-privileges, seccomp, pids/memory/CPU
limits, no host paths. Only the Docker backend can run root sandboxes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: The capabilities a root sandbox may keep: file ownership and signals inside its own container.
CONTAINER_ROOT_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETGID", "SETUID")
_USER = re.compile(r"^\d+:\d+$")


@dataclass(frozen=True)
class Privileges:
    """The uid:gid of the sandbox's agent (and so of its commands) and the capabilities it keeps."""

    user: str = "1000:1000"
    """``uid:gid`` numbers; the workdir tmpfs is owned by them."""
    capabilities: tuple[str, ...] = ()
    """Capabilities added back after dropping all; only names from `CONTAINER_ROOT_CAPABILITIES`."""

    def __post_init__(self) -> None:
        if not _USER.match(self.user):
            raise ValueError(f"Privileges.user={self.user!r} must be numeric 'uid:gid', e.g. '1000:1000'")
        unknown = sorted(set(self.capabilities) - set(CONTAINER_ROOT_CAPABILITIES))
        if unknown:
            raise ValueError(f"Privileges.capabilities {unknown} are not allowed in a sandbox; choose from "
                             f"{list(CONTAINER_ROOT_CAPABILITIES)} (none of them reaches outside the container)")

    @classmethod
    def container_root(cls) -> Privileges:
        """uid 0 inside the container with `CONTAINER_ROOT_CAPABILITIES` and nothing else."""
        return cls("0:0", CONTAINER_ROOT_CAPABILITIES)

    @property
    def is_default(self) -> bool:
        """True for the unprivileged uid 1000 with no capabilities."""
        return self == Privileges()

    @property
    def uid(self) -> int:
        return int(self.user.split(":")[0])

    @property
    def gid(self) -> int:
        return int(self.user.split(":")[1])
