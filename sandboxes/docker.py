"""The Docker backend: one locked-down container per sandbox, driven through its attach socket.

Safe defaults, each of which a caller can only loosen on purpose (`network=True`):
no network, read-only root filesystem, size-limited tmpfs workdir and /tmp
(nosuid, nodev), uid 1000, no-new-privileges, every capability dropped (root
sandboxes keep only `privileges.CONTAINER_ROOT_CAPABILITIES`), pids,
memory (swap off) and CPU limits, no core dumps, no Docker socket or host path
mounted, a tiny init as PID 1. The container's main process is the in-sandbox
agent; exec round trips go over the attach socket instead of `docker exec`,
which is what makes a warm exec cost about a millisecond.

Every container is labelled with its owning process (see `sandboxes.reaper`)
and removed automatically when the agent exits, which it does as soon as the
owning process's attach socket closes.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from agentgym.sandboxes import reaper
from agentgym.sandboxes.channel import AGENT_SOURCE, AttachSocket, Channel, agent_command
from agentgym.sandboxes.errors import BackendUnavailable, ImageNotFound
from agentgym.sandboxes.limits import Limits
from agentgym.sandboxes.privileges import Privileges
from agentgym.sandboxes.sandbox import Sandbox, agent_config

if TYPE_CHECKING:
    import docker as docker_sdk

SANDBOX_UID = Privileges().user
START_TIMEOUT_S = 60.0
INSTALL_HINT = "pip install 'agentgym[docker]'"
ENGINE_HINT = "start the engine with `bash scripts/docker.sh` (as root), or use backend='local'"

_client_lock = threading.Lock()
_client: docker_sdk.DockerClient | None = None


def client() -> docker_sdk.DockerClient:
    """The process-wide Docker client; raises BackendUnavailable when no engine answers."""
    global _client
    with _client_lock:
        if _client is not None:
            return _client
        try:
            import docker as docker_sdk
        except ImportError as exc:
            raise BackendUnavailable(f"the Docker backend needs the Docker SDK for Python: {INSTALL_HINT}") from exc
        try:
            candidate = docker_sdk.from_env(timeout=120, max_pool_size=256)
            candidate.ping()
        except Exception as exc:  # the SDK raises DockerException, requests and socket errors alike
            raise BackendUnavailable(f"no Docker engine answers ({exc}); {ENGINE_HINT}") from exc
        reaper.install(candidate)
        _client = candidate
        return _client


def engine_available() -> bool:
    """True when the SDK is installed and an engine answers a ping."""
    try:
        client()
    except BackendUnavailable:
        return False
    return True


class DockerHandle:
    """Kill and post-mortem for one container."""

    def __init__(self, api: Any, container_id: str, attach: AttachSocket):
        self.api, self.id, self.attach = api, container_id, attach

    def kill(self) -> None:
        import docker.errors

        try:
            self.api.remove_container(self.id, force=True)
        except docker.errors.NotFound:
            pass
        except docker.errors.APIError as exc:
            if exc.status_code != 409:  # 409: the engine is already auto-removing it
                raise
        reaper.forget(self.id)

    def death_report(self) -> tuple[bool, str]:
        import docker.errors

        tail = bytes(self.attach.stderr[-500:]).decode("utf-8", "replace").strip()
        agent = f"; agent stderr: {tail}" if tail else ""
        try:
            state = self.api.inspect_container(self.id)["State"]
        except docker.errors.NotFound:
            return False, f"container {self.id[:12]} has exited and been removed{agent}"
        except Exception as exc:
            return False, f"container {self.id[:12]} could not be inspected ({exc}){agent}"
        oom = bool(state.get("OOMKilled"))
        return oom, (
            f"container {self.id[:12]} status={state.get('Status')} exit_code={state.get('ExitCode')} "
            f"oom_killed={oom} {state.get('Error') or ''}".rstrip() + agent
        )


def host_config(api: Any, limits: Limits, workdir: str, network: bool,
                privileges: Privileges | None = None) -> dict[str, Any]:
    """The HostConfig that carries every isolation default."""
    from docker.types import LogConfig, Ulimit

    privileges = privileges or Privileges()
    size = limits.disk_bytes
    return api.create_host_config(
        network_mode="bridge" if network else "none",
        read_only=True,
        tmpfs={
            workdir: f"size={size},uid={privileges.uid},gid={privileges.gid},mode=0755,exec,nosuid,nodev",
            "/tmp": f"size={size},mode=1777,exec,nosuid,nodev",
        },
        cap_drop=["ALL"],
        cap_add=list(privileges.capabilities) or None,
        security_opt=["no-new-privileges"],
        pids_limit=limits.pids,
        mem_limit=limits.memory_bytes,
        memswap_limit=limits.memory_bytes,
        nano_cpus=int(limits.cpus * 1e9),
        ulimits=[Ulimit(name="core", soft=0, hard=0)],
        init=True,
        auto_remove=True,
        ipc_mode="private",
        log_config=LogConfig(type="none"),
    )


def open_docker(image: str, *, limits: Limits, network: bool, workdir: str,
                privileges: Privileges | None = None) -> Sandbox:
    """Create, attach and start one container, and wait for its agent to say hello."""
    import docker.errors

    privileges = privileges or Privileges()
    api = client().api
    writable = [workdir, "/tmp"] if workdir != "/tmp" else ["/tmp"]
    command = agent_command("python3", agent_config(workdir, limits, writable))
    try:
        created = api.create_container(
            image,
            command=command,
            user=privileges.user,
            working_dir=workdir,
            stdin_open=True,  # with detach=False this also sets StdinOnce: our socket closing ends stdin
            tty=False,
            use_config_proxy=False,
            labels={**reaper.owner_labels(), "agentgym.image": image},
            host_config=host_config(api, limits, workdir, network, privileges),
            network_disabled=not network,
        )
    except docker.errors.ImageNotFound as exc:
        raise ImageNotFound(
            f"image {image!r} is not in the local engine and no registry can be reached; build it with "
            f"`agentgym sandbox build {image.split(':')[0].removeprefix('agentgym/')}` "
            "(the base image comes from `bash docker/base.sh`)"
        ) from exc
    cid = created["Id"]
    reaper.remember(cid)
    try:
        raw = api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
        attach = AttachSocket(getattr(raw, "_sock", raw))
        handle = DockerHandle(api, cid, attach)
        api.start(cid)
        attach.send(AGENT_SOURCE)
    except Exception:
        try:
            api.remove_container(cid, force=True)
        finally:
            reaper.forget(cid)
        raise
    sandbox = Sandbox(
        channel=Channel(attach),
        handle=handle,
        image=image,
        backend="docker",
        limits=limits,
        workdir=workdir,
        network=network,
    )
    sandbox.start(START_TIMEOUT_S)
    return sandbox
