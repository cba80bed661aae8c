"""The local backend: bubblewrap namespaces for machines without a container engine.

It is weaker than the Docker backend; sandboxes/README.md lists exactly what
it enforces and what it cannot. In short: the sandbox gets new user, pid,
mount, network, ipc, uts and cgroup namespaces, the host's /usr and /etc
read-only (so the `image` argument is recorded but not used: commands run on
the host's userland), a size-limited tmpfs workdir and /tmp, uid 1000 with no
capabilities and no-new-privileges, and per-process rlimits (address space,
processes, no core dumps) set by the agent before any command runs. There is
no cgroup: no CPU quota, no whole-sandbox memory limit and no OOM-kill report. When the caller is root, bwrap itself runs as `nobody`, so
the sandbox's uid maps to an unprivileged host uid.
"""

from __future__ import annotations

import functools
import os
import shutil
import signal
import subprocess
import sys
import uuid

from agentgym.sandboxes.channel import Channel, agent_command, popen_pipes, process_death_report
from agentgym.sandboxes.errors import BackendUnavailable
from agentgym.sandboxes.limits import Limits
from agentgym.sandboxes.procfs import children
from agentgym.sandboxes.sandbox import Sandbox, agent_config

NOBODY = 65534
START_TIMEOUT_S = 30.0
PYTHON = "/usr/bin/python3"
INSTALL_HINT = "apt-get install bubblewrap (and make sure unprivileged user namespaces are enabled)"

# What the local backend documents as unenforced; the escape suite skips these checks by name.
UNSUPPORTED = {
    "oom_killed": "local backend has no memory cgroup: a memory hog fails its allocation "
    "(RLIMIT_AS) instead of being OOM-killed, so oom_killed is never reported",
    "cpu_quota": "local backend has no CPU cgroup: Limits.cpus is not enforced",
}


def _run_as_nobody() -> dict[str, object]:
    return {"user": NOBODY, "group": NOBODY, "extra_groups": []} if os.geteuid() == 0 else {}


def bwrap_argv(workdir: str, limits: Limits, network: bool) -> list[str]:
    """The bwrap command line (without the command to run inside)."""
    argv = ["bwrap", "--unshare-all", "--unshare-user", "--disable-userns", "--new-session", "--cap-drop", "ALL", "--hostname", "sandbox"]
    if network:
        argv.append("--share-net")
    argv += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = "/" + name
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for mount in dict.fromkeys(["/tmp", workdir]):
        argv += ["--size", str(limits.disk_bytes), "--perms", "1777" if mount == "/tmp" else "0755", "--tmpfs", mount]
    argv += ["--uid", "1000", "--gid", "1000", "--chdir", workdir, "--remount-ro", "/"]
    return argv


@functools.cache
def unavailable_reason() -> str | None:
    """None when bwrap can build a sandbox here, else why not (and how to fix it)."""
    if shutil.which("bwrap") is None:
        return f"bwrap is not installed: {INSTALL_HINT}"
    if not os.path.exists(PYTHON):
        return f"{PYTHON} is missing; the in-sandbox agent needs it (apt-get install python3)"
    argv = bwrap_argv("/work", Limits(), network=False) + ["--", PYTHON, "-I", "-S", "-c", "pass"]
    try:
        proc = subprocess.run(argv, capture_output=True, timeout=30, **_run_as_nobody())
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap could not run: {exc}"
    if proc.returncode != 0:
        return f"bwrap failed (exit {proc.returncode}): {proc.stderr.decode(errors='replace').strip()}; {INSTALL_HINT}"
    return None


class LocalHandle:
    """Kill and post-mortem for one bwrap process tree."""

    def __init__(self, proc: subprocess.Popen[bytes]):
        self.proc = proc
        self.id = f"local-{proc.pid}-{uuid.uuid4().hex[:8]}"

    def kill(self) -> None:
        """SIGKILL the sandbox's pid-namespace init (every process inside dies with it), then bwrap itself.

        Killing bwrap alone is not enough: its child, the namespace's init, lives on, and so does an agent that
        cannot see its input close (a frozen one), each process in state T for good."""
        if self.proc.poll() is None:
            for pid in children(self.proc.pid):  # bwrap is not reaped yet, so its pid names no other process
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            try:  # bwrap reaps its child and exits by itself; a stuck one is killed
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.proc.wait()

    def death_report(self) -> tuple[bool, str]:
        return process_death_report(self.proc, f"bwrap process {self.proc.pid}")


def open_local(image: str, *, limits: Limits, network: bool, workdir: str) -> Sandbox:
    """Start the agent inside a fresh bwrap sandbox and wait for its hello."""
    reason = unavailable_reason()
    if reason is not None:
        raise BackendUnavailable(f"the local backend cannot run here: {reason}")
    writable = list(dict.fromkeys([workdir, "/tmp"]))
    config = agent_config(workdir, limits, writable)
    config["rlimits"] = {
        "RLIMIT_AS": limits.memory_bytes,
        "RLIMIT_NPROC": limits.pids,
        "RLIMIT_CORE": 0,
    }
    argv = bwrap_argv(workdir, limits, network) + ["--", *agent_command(PYTHON, config)]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=sys.stderr if os.environ.get("AGENTGYM_SANDBOX_DEBUG") else subprocess.DEVNULL,
        close_fds=True,
        **_run_as_nobody(),
    )
    sandbox = Sandbox(
        channel=Channel(popen_pipes(proc)),
        handle=LocalHandle(proc),
        image=image,
        backend="local",
        limits=limits,
        workdir=workdir,
        network=network,
    )
    sandbox.start(START_TIMEOUT_S)
    return sandbox
