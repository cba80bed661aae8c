"""How an env server container is started, from its image's labels: the default, or one that runs sandboxes inline.

Every env server container runs with ``--network none``, a read-only root,
no capabilities, no-new-privileges and memory/pid limits (`EnvCluster`). An
image whose env runs model-written commands (docker/code/) cannot start
sandbox containers from inside (no engine there, and the engine's socket is
never mounted), so its recipe says so with labels and gets a little more,
exactly this:

- ``LABEL agentgym.server.inline-slots=N`` (and ``agentgym.server.slot-size``,
  a tmpfs size such as ``64m``): N workspace tmpfs mounts, ``/sandboxes/<n>``,
  each owned by the slot's uid with mode 0700 (`agentgym.sandboxes.inline`);
  the capabilities ``SETUID`` and ``SETGID`` and nothing else, so the server
  (root in the container, the recipe's ``USER root``) can start each slot's
  agent under the slot's uid; Docker's init as pid 1 so the processes a killed
  slot leaves behind are reaped; a private tmpfs ``/srv/agentgym`` (mode 0700)
  for the server's own files; a small shared ``/tmp`` (64 MiB: the slots'
  TMPDIR is their own workspace, and each slot's /tmp files go at its reset); a pid limit that fits every slot's process
  limit; and the socket directory without access for others (0770, the
  server reaching it through the host user's group), so no slot can connect
  to the server or replace its socket.

- ``LABEL agentgym.server.root-sandbox=/srv``: the env's model operates a
  whole system as root (SRE-v0), so the replica *is* that system's container:
  one session per replica, the sandbox is the root slot (work directory
  ``/srv`` and ``/tmp``, tmpfs), the container gets the capabilities of
  `Privileges.container_root()` (what the Docker backend gives the same
  sandbox), and the server runs as pid 1 without Docker's init and without
  any signal handler (``AGENTGYM_SERVER_PID1``): the kernel delivers no
  SIGKILL or SIGSTOP to a namespace's init from inside it, so ``kill -9 -1``
  by the model ends its own processes and its episode, not the server, which
  then reports the episode as the model's doing (``system_destroyed``).

A root server without CAP_DAC_OVERRIDE, CAP_CHOWN, CAP_FOWNER or CAP_KILL
can read only its own and world-readable files, cannot signal the slots (it
cleans a slot by running the cleaner as the slot's uid) and cannot change
file ownership; SETUID/SETGID are what a uid switch needs and all it allows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from agentgym.errors import ConfigError

SLOTS_LABEL = "agentgym.server.inline-slots"
SLOT_SIZE_LABEL = "agentgym.server.slot-size"
ROOT_SANDBOX_LABEL = "agentgym.server.root-sandbox"
INLINE_CAPABILITIES = ["SETUID", "SETGID"]
#: processes a slot's uid may have (its commands' RLIMIT_NPROC with Code-v0's defaults) and the server's share
PIDS_PER_SLOT, SERVER_PIDS = 128, 512


@dataclass
class ContainerProfile:
    """What an image adds to the default env server container (see the module docstring)."""

    directory_mode: int = 0o777  #: the mounted socket directory (the default server runs as the image's non-root user)
    tmpfs: dict[str, str] = field(default_factory=dict)
    cap_add: list[str] = field(default_factory=list)
    group_add: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    init: bool = False
    pids_limit: int | None = None
    max_sessions: int | None = None  #: a cap on the server's sessions (one for a root-sandbox image)

    def host_config(self, base: dict[str, Any]) -> dict[str, Any]:
        """`base` (create_host_config keyword arguments) with this profile's additions."""
        config = {**base, "tmpfs": {**base.get("tmpfs", {}), **self.tmpfs}}
        if self.cap_add:
            config["cap_add"] = self.cap_add
        if self.group_add:
            config["group_add"] = self.group_add
        if self.init:
            config["init"] = True
        if self.pids_limit is not None:
            config["pids_limit"] = max(int(base.get("pids_limit") or 0), self.pids_limit)
        return config


def _root_sandbox_profile(image: str, workdir: str) -> ContainerProfile:
    from agentgym.runtime.container import PID1_GUARD
    from agentgym.sandboxes.privileges import CONTAINER_ROOT_CAPABILITIES

    if not workdir.startswith("/") or workdir.rstrip("/") in ("", "/tmp", "/run", "/proc", "/sys", "/dev"):
        raise ConfigError(f"image {image}: label {ROOT_SANDBOX_LABEL}={workdir!r} must be the absolute path of the "
                          "root sandbox's own work directory, such as /srv")
    return ContainerProfile(
        directory_mode=0o770, group_add=[str(os.getgid())], cap_add=list(CONTAINER_ROOT_CAPABILITIES),
        tmpfs={workdir: "size=64m,mode=0755,exec,nosuid,nodev", "/tmp": "size=64m,mode=1777,exec,nosuid,nodev",
               "/var/lib/agentgym": "size=64m,mode=0700"},
        environment={PID1_GUARD: "1"}, max_sessions=1)


def container_profile(docker_client: Any, image: str) -> ContainerProfile:
    """The profile `image`'s labels ask for; a ConfigError when they are inconsistent."""
    config = docker_client.api.inspect_image(image)["Config"] or {}
    labels = config.get("Labels") or {}
    if ROOT_SANDBOX_LABEL in labels:
        return _root_sandbox_profile(image, labels[ROOT_SANDBOX_LABEL])
    if SLOTS_LABEL not in labels:
        return ContainerProfile()
    try:
        slots = int(labels[SLOTS_LABEL])
        if not 1 <= slots <= 1000:
            raise ValueError
    except ValueError:
        raise ConfigError(f"image {image}: label {SLOTS_LABEL}={labels[SLOTS_LABEL]!r} must be a number of slots "
                          "from 1 to 1000") from None
    if (config.get("User") or "root") not in ("root", "0", "0:0"):
        raise ConfigError(f"image {image} runs inline sandboxes, so its server must start as root (USER root in "
                          f"the recipe) to switch to the slots' uids; it sets USER {config.get('User')}")
    from agentgym.sandboxes import inline

    tmpfs = inline.slot_mounts(slots, labels.get(SLOT_SIZE_LABEL, "64m"))
    tmpfs["/srv/agentgym"] = "size=256m,mode=0700"
    tmpfs["/tmp"] = "size=64m,mode=1777"  # shared by the slots (their TMPDIR is their workspace): keep it small
    return ContainerProfile(
        directory_mode=0o770, tmpfs=tmpfs, cap_add=list(INLINE_CAPABILITIES), group_add=[str(os.getgid())],
        environment={"AGENTGYM_INLINE_SLOTS": str(slots), "AGENTGYM_INLINE_ROOT": inline.ROOT,
                     "AGENTGYM_INLINE_FIRST_UID": str(inline.FIRST_UID)},
        init=True, pids_limit=slots * PIDS_PER_SLOT + SERVER_PIDS)
