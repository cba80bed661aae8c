"""The soak env's sandbox: a real agentgym sandbox with a small writable workspace, on every episode's path.

`Workspace` opens one sandbox per env instance, when the env is made, from the ``sandboxes`` package (not at the first
reset: starting a sandbox's agent process takes seconds on a loaded machine, which belong to the env's start and its
own time limit, not to a reset under the run's turn limit):

- on a host (the soak's process mode) the ``local`` backend: bubblewrap with a tmpfs workspace of
  ``Limits.disk_bytes`` (1 MiB here);
- in an env server container (``--envs containers``) bubblewrap cannot run (no user namespaces there) and Docker
  cannot be reached, so the soak env is served from the ``code`` family image, whose server runs sandboxes
  ``inline`` (``AGENTGYM_SANDBOX_BACKEND=inline``): each sandbox is a slot of the container with its own uid and a
  tmpfs workspace the engine mounted (64 MiB, the image's ``slot-size``); every command's files are also capped at
  ``Limits.disk_bytes`` (RLIMIT_FSIZE, EFBIG).

Every step writes the move into a new file of the workspace (``moves/NN.txt``: a new file needs a new page of the
tmpfs, so a full disk refuses it), `fill` writes files of zeros from inside the sandbox until the filesystem refuses
with ENOSPC, and `reset` (every env reset) puts the workspace back to the state right after the sandbox started, so
a full disk never outlives its episode.
"""

from __future__ import annotations

import errno
from typing import Any

from agentgym.errors import EnvInfraError

#: what the env's error says first when the workspace refused the step's write (bench/soak_accounting.py reads it)
DISK_FULL = "sandbox disk full"
LIMITS = {"disk_bytes": 1 << 20, "memory_bytes": 128 << 20, "exec_timeout_s": 20.0}
#: run inside the sandbox: write files of zeros until the filesystem refuses; a file past the per-file limit
#: (EFBIG, the inline backend's RLIMIT_FSIZE) moves on to the next file, anything else (ENOSPC) ends the fill
FILL = r"""
import errno, os
chunk, n, written = b"\0" * 65536, 0, 0
while True:
    fd = os.open(f"fill-{n}", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while True:
            written += os.write(fd, chunk)
    except OSError as exc:
        code = exc.errno
    finally:
        os.close(fd)
    n += 1
    if code != errno.EFBIG:
        break
print(errno.errorcode.get(code, code), written, n)
"""


class Workspace:
    """One env instance's sandbox; see the module docstring."""

    def __init__(self, backend: str | None = None):
        from agentgym.sandboxes import Limits, default_backend
        from agentgym.sandboxes import open as open_sandbox

        self.sandbox = open_sandbox("soak", backend=backend or default_backend("local"), limits=Limits(**LIMITS))

    def reset(self) -> None:
        """Wipe the workspace back to the state right after the sandbox started."""
        self.sandbox.reset()

    @property
    def storage(self) -> str | None:
        """Where the workspace's files live, which a later sandbox may reuse: an inline slot's tmpfs (its workdir;
        the start record adds the container), else this sandbox's own tmpfs (its id, never reused)."""
        if self.sandbox is None:
            return None
        return self.sandbox.workdir if self.sandbox.backend == "inline" else self.sandbox.id

    def record(self, turn: int, action: str) -> None:
        """The step's work: the move into ``moves/NN.txt``; a full disk is the env's infra failure, named."""
        path = f"moves/{turn:02d}.txt"
        try:
            self.sandbox.write_files({path: action[:200] + "\n"})
        except OSError as exc:
            if exc.errno not in (errno.ENOSPC, errno.EFBIG):
                raise
            raise EnvInfraError(f"{DISK_FULL}: sandbox {self.sandbox.id} ({self.sandbox.backend}) refused {path} in "
                                f"its workspace {self.sandbox.workdir} ({errno.errorcode[exc.errno]}: "
                                f"{exc.strerror or exc})", kind="sandbox_disk_full") from exc

    def fill(self) -> dict[str, Any]:
        """Fill the workspace from inside the sandbox until the filesystem refuses; what refused and how much fit."""
        result = self.sandbox.exec(["python3", "-I", "-S", "-c", FILL])
        fields = result.stdout.split()
        if result.exit_code != 0 or len(fields) != 3 or fields[0] != "ENOSPC":
            raise RuntimeError(f"the disk fill of sandbox {self.sandbox.id} did not end in ENOSPC: exit "
                               f"{result.exit_code}, {result.stdout.strip()!r} {result.stderr.strip()[-300:]!r} "
                               f"{result.error or ''}")
        return {"refused": fields[0], "bytes": int(fields[1]), "files": int(fields[2])}

    def close(self) -> None:
        if self.sandbox is not None:
            self.sandbox.close()
            self.sandbox = None
