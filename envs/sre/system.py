"""One SRE-v0 task's running system: a root sandbox of the `sre` image, leased from a shared pool.

The image (`docker/sre/`) is built on first use, cached by content hash
(`agentgym.sandboxes.images.build`). Containers come from one process-wide
`sandboxes.Pool` per image and limits: a finished episode's container is
reset in the background (every process killed, /srv and /tmp wiped) and
handed to the next episode, which seeds /srv and starts the system with
``/opt/sre/bin/sre-start``. The container runs as root inside
(`Privileges.container_root()`), with no network and the limits below.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from typing import Any

from agentgym.sandboxes import ExecResult, Limits, Pool, Privileges, Sandbox, SandboxError, default_backend

from agentgym.errors import EnvInfraError

MiB = 1 << 20
IMAGE_NAME = "sre"
WORKDIR = "/srv"
LIMITS = Limits(cpus=1.0, memory_bytes=384 * MiB, pids=256, disk_bytes=64 * MiB, exec_timeout_s=30.0,
                lifetime_s=3600.0, output_bytes=256 * 1024)
START_TIMEOUT_S = 60.0
HEALTH_TIMEOUT_S = 20.0

_lock = threading.Lock()
_images: dict[str, str] = {}
_pools: dict[tuple[str, Limits], Pool] = {}


class SystemDied(Exception):
    """The system's container stopped answering (it died, was OOM-killed or ran out its lifetime)."""


@dataclass(frozen=True)
class Health:
    """The system's own health checks at one moment."""

    healthy: bool
    checks: dict[str, dict[str, Any]]

    @property
    def vector(self) -> dict[str, bool]:
        return {name: bool(c.get("ok")) for name, c in self.checks.items()}

    def failing(self) -> list[str]:
        return [f"{name} ({c.get('detail', '')})" for name, c in self.checks.items() if not c.get("ok")]


def image_tag() -> str:
    """The content-addressed tag of the SRE image, building the base and the image when missing.

    Inside SRE-v0's own server image (docker/sre-env/, inline sandboxes) the system is this very container:
    nothing to build.
    """
    if default_backend("docker") == "inline":
        return "inline"
    with _lock:
        if IMAGE_NAME not in _images:
            from agentgym.sandboxes import images

            try:
                images.ensure_base()
                _images[IMAGE_NAME] = images.build(IMAGE_NAME).tag
            except SandboxError as exc:
                raise EnvInfraError(f"SRE-v0 cannot build its system image: {exc}", kind="image_build") from exc
        return _images[IMAGE_NAME]


def shared_pool(tag: str, limits: Limits, size: int) -> Pool:
    """The process-wide pool of root containers of `tag`, grown on demand up to `size`."""
    if default_backend("docker") == "inline":
        size = 1  # one root slot per replica: an episode waits for the previous one's reset
    with _lock:
        pool = _pools.get((tag, limits))
        if pool is None or pool.size < size:
            if pool is not None:
                pool.size = size
            else:
                pool = Pool(tag, size, limits=limits, workdir=WORKDIR, warm=False, backend=default_backend("docker"),
                            privileges=Privileges.container_root(), start_workers=8)
                _pools[(tag, limits)] = pool
        return pool


def close_pools() -> None:
    """Stop every container of every shared pool (the next reset starts fresh ones)."""
    with _lock:
        pools = list(_pools.values())
        _pools.clear()
    for pool in pools:
        pool.close()


class System:
    """A leased container running one task's system."""

    def __init__(self, pool: Pool, sandbox: Sandbox):
        self.pool, self.sandbox = pool, sandbox

    @classmethod
    def start(cls, pool: Pool, pre: str, post: str, acquire_timeout_s: float = 300.0) -> System:
        """Lease a clean container and start the system in it; EnvInfraError when that fails."""
        try:
            sandbox = pool.acquire(timeout=acquire_timeout_s)
        except (SandboxError, TimeoutError) as exc:
            raise EnvInfraError(f"no SRE-v0 container could be started: {exc}", kind="container_start") from exc
        system = cls(pool, sandbox)
        try:
            result = system.exec(["/opt/sre/bin/sre-start"], stdin=json.dumps({"pre": pre, "post": post}),
                                 timeout=START_TIMEOUT_S)
        except SystemDied as exc:
            system.release()
            raise EnvInfraError(f"the SRE-v0 container died while starting the system: {exc}",
                                kind="container_died") from exc
        if result.exit_code != 0:
            system.release()
            raise EnvInfraError(f"starting the SRE-v0 system failed (exit {result.exit_code}): "
                                f"{result.stderr.strip()[-800:]}", kind="system_start")
        return system

    def exec(self, argv: list[str] | str, *, stdin: str | None = None, timeout: float = 20.0) -> ExecResult:
        """Run a command as root in the system container; SystemDied when the container is gone."""
        try:
            result = self.sandbox.exec(argv, stdin=stdin, timeout=timeout)
        except SandboxError as exc:
            raise SystemDied(str(exc)) from exc
        if result.sandbox_died:
            raise SystemDied(result.error or "the system container died")
        return result

    def health(self) -> Health:
        """The system's own health checks (`/opt/sre/bin/healthcheck`)."""
        result = self.exec(["/opt/sre/bin/healthcheck"], timeout=HEALTH_TIMEOUT_S)
        try:
            report = json.loads(result.stdout)
            return Health(bool(report["healthy"]), dict(report["checks"]))
        except (ValueError, KeyError, TypeError):
            detail = {"ok": False, "detail": f"the health check itself failed: {result.stderr.strip()[-300:]}"}
            return Health(False, {"healthcheck": detail})

    @property
    def alive(self) -> bool:
        return self.sandbox.alive

    def release(self) -> None:
        """Give the container back to the pool (reset in the background, or replaced when dead)."""
        try:
            self.pool.release(self.sandbox)
        except ValueError:  # the pool replaced it already
            self.sandbox.close()
