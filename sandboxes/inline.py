"""The inline backend: sandboxes for an env server that already runs inside its own hardened container.

A family image (docker/code/) runs the env server in a container with no
network, a read-only root, memory and pid limits and only the SETUID and
SETGID capabilities. Docker is not reachable from there (and mounting the
engine's socket would hand the model the host), so a sandbox is a slot of
that container instead of a container of its own:

- slot N has its own uid and gid, ``FIRST_UID + N``, which nothing else uses:
  the server's files (the hidden tests, the grader) are root's and not
  readable by it, and its processes cannot signal the server or another slot;
- its workspace is ``ROOT/N``: a tmpfs the engine mounted with that uid as
  owner, mode 0700 and a size limit (`slot_mounts` gives the engine the list),
  so one slot cannot fill another's disk or read its files;
- its agent (sandboxes/agent.py, as for every backend) runs as that uid in its
  own session, with the rlimits of `command_rlimits` on every command
  (CPU seconds, address space, processes of the uid, file size, open files, no
  core dumps) and ``oom_score_adj`` 1000, so the kernel's OOM killer takes the
  model's processes before the server;
- a reset kills every process of the uid and wipes the workspace and what the
  uid left in /tmp and /dev/shm; closing a slot does the same from a helper
  that runs as the uid (`clean_slot`), so the server never needs CAP_KILL or
  CAP_DAC_OVERRIDE;
- a slot is taken by one process of the container at a time: an env that is
  not thread-safe runs each session in a worker process of its own, each with
  its own copy of this module, so a process claims a slot under an exclusive
  lock on ``ROOT`` (`flock`, shared by every process of the container) and
  skips every slot whose uid still has a process (another process's agent or
  its commands), until its own agent runs as that uid.

The container supplies what a uid cannot: ``--network none`` and the memory
and pid limits of the whole replica (docs/sandbox-security.md compares this
with the Docker backend). `open_inline` refuses to run where the process sees
a network interface other than loopback, unless AGENTGYM_INLINE_UNCONTAINED=1
says the caller knows (tests of the backend itself on a development host).
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass

from agentgym.sandboxes.channel import (
    AGENT_SOURCE,
    Channel,
    agent_command,
    popen_pipes,
    process_death_report,
)
from agentgym.sandboxes.errors import BackendUnavailable
from agentgym.sandboxes.limits import Limits
from agentgym.sandboxes.privileges import Privileges
from agentgym.sandboxes.procfs import stat_fields
from agentgym.sandboxes.sandbox import Sandbox, agent_config

#: Where the slots' workspaces are (each a tmpfs the engine mounts; a plain directory outside a family image).
ROOT = os.environ.get("AGENTGYM_INLINE_ROOT", "/sandboxes")
FIRST_UID = int(os.environ.get("AGENTGYM_INLINE_FIRST_UID", "20000"))
SLOTS = int(os.environ.get("AGENTGYM_INLINE_SLOTS", "48"))
START_TIMEOUT_S = 30.0
SCRUB = ("/tmp", "/dev/shm")
NOFILE = 256

ROOT_SLOT = -1  #: the one root slot of a root-sandbox image (SRE-v0)
_lock = threading.Lock()
_taken: set[int] = set()
#: pids of this process's own subprocesses (agents, cleaners), which `reap_orphans` must leave to subprocess
CHILDREN: set[int] = set()

def slot_mounts(slots: int, size: str = "64m", root: str = ROOT) -> dict[str, str]:
    """The tmpfs mounts (path -> options) a family container needs: one workspace per slot, `size` each."""
    return {f"{root}/{n}": f"size={size},uid={FIRST_UID + n},gid={FIRST_UID + n},mode=0700,exec,nosuid,nodev"
            for n in range(slots)}


def command_rlimits(limits: Limits, root: bool = False) -> dict[str, int]:
    """The rlimits of every command of a slot (the agent applies them before exec).

    The root slot has no RLIMIT_NPROC (uid 0's count spans the whole machine; the container's pid limit
    holds it) and no RLIMIT_CPU (its system's daemons run for the whole episode).
    """
    rlimits = {
        "RLIMIT_CPU": math.ceil(limits.exec_timeout_s) * 2,
        "RLIMIT_AS": limits.memory_bytes,
        "RLIMIT_NPROC": limits.pids,
        "RLIMIT_FSIZE": limits.disk_bytes,
        "RLIMIT_NOFILE": NOFILE,
        "RLIMIT_CORE": 0,
    }
    if root:
        del rlimits["RLIMIT_NPROC"], rlimits["RLIMIT_CPU"]
    return rlimits


def unavailable_reason(root: bool = False) -> str | None:
    """None when this process can run inline sandboxes (with `root`: the root slot), else why not."""
    if not hasattr(os, "setuid"):
        return "the inline backend needs a POSIX system"
    uncontained = os.environ.get("AGENTGYM_INLINE_UNCONTAINED") == "1"
    if root and os.getpid() != 1:  # never overridable: on a host, the root slot's cleaner would kill the host
        return ("the root slot's kill(-1) reaches every process but pid 1, so the env server must be its "
                "container's pid 1 (a root-sandbox image starts without Docker's init)")
    if not uncontained:
        try:
            interfaces = sorted(set(os.listdir("/sys/class/net")) - {"lo"})
        except OSError:
            interfaces = []
        if interfaces:
            return (f"this process sees network interfaces {interfaces}: the inline backend is for an env server "
                    "inside a --network none family container (agentgym envs up); elsewhere use backend='docker'")
    try:
        with open("/proc/self/status") as f:
            caps = int(next(line for line in f if line.startswith("CapEff:")).split()[1], 16)
    except (OSError, StopIteration, ValueError):
        caps = 0
    if not (caps >> 6) & 1 or not (caps >> 7) & 1:  # CAP_SETGID = 6, CAP_SETUID = 7
        return ("the inline backend needs CAP_SETUID and CAP_SETGID to run commands under the slots' uids "
                "(the family container adds exactly these two)")
    return None


@dataclass(frozen=True)
class Slot:
    """A taken slot: its number (ROOT_SLOT for the root slot), uid, workspace and the dirs it may write."""

    n: int
    uid: int
    work: str
    writable: tuple[str, ...]

    @property
    def is_root(self) -> bool:
        return self.n == ROOT_SLOT

    def config(self, limits: Limits | None = None, **extra: object) -> dict:
        """The agent's config: a root slot kills every process but pid 1 (the server), a uid slot only its own."""
        base = agent_config(self.work, limits or Limits(), list(self.writable))
        if not self.is_root:
            base["env"].update(HOME=self.work, TMPDIR=self.work, USER=f"sandbox{self.n}")
            base.update(kill_scope="uid", scrub=list(SCRUB))
        if limits is not None:
            base["rlimits"] = command_rlimits(limits, root=self.is_root)
        return {**base, **extra}


def _take_slot(root_workdir: str | None) -> Slot:
    """A free slot: the one root slot (its workspace `root_workdir` plus /tmp), or the lowest uid slot that neither
    this process holds nor any process of the container uses (a live process of its uid: see `_busy_uids`)."""
    with _lock:
        busy = set() if root_workdir else _busy_uids()
        wanted = [ROOT_SLOT] if root_workdir else range(SLOTS)
        for n in wanted:
            if n not in _taken and FIRST_UID + n not in busy:
                _taken.add(n)
                if root_workdir:
                    return Slot(n, 0, root_workdir, (root_workdir, "/tmp"))
                work = os.path.join(ROOT, str(n))
                return Slot(n, FIRST_UID + n, work, (work,))
    if root_workdir:
        raise BackendUnavailable("the root slot is in use: a root-sandbox image runs one sandbox at a time (its "
                                 "server has max_sessions 1); start more replicas")
    raise BackendUnavailable(f"all {SLOTS} inline sandbox slots are in use; lower the pool sizes or raise "
                             "AGENTGYM_INLINE_SLOTS (the family container mounts one workspace per slot)")


def _busy_uids() -> set[int]:
    """The real uids of every process this one can see (a slot whose uid has a process is in use elsewhere)."""
    uids = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uids.add(int(next(line for line in f if line.startswith("Uid:")).split()[1]))
        except (OSError, StopIteration, ValueError):
            continue  # gone meanwhile
    return uids


@contextlib.contextmanager
def _claiming(root: bool):
    """Held while a uid slot is chosen and its agent started: an exclusive `flock` on ``ROOT``, so two processes of
    one container (an env's worker processes) never take the same slot. The root slot needs none (one session)."""
    if root:
        yield
        return
    os.makedirs(ROOT, exist_ok=True)
    fd = os.open(ROOT, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _give_back(slot: Slot) -> None:
    with _lock:
        _taken.discard(slot.n)


def _check_workspace(slot: Slot) -> None:
    """The slot's workspace: the engine's tmpfs in a family container, else made here (tests on a host)."""
    if slot.is_root:
        if not os.path.isdir(slot.work):
            raise BackendUnavailable(f"the root slot's workdir {slot.work} does not exist; the image's profile "
                                     "mounts it (agentgym.runtime.profile)")
        return
    if not os.path.isdir(slot.work):
        os.makedirs(slot.work, mode=0o700)
        os.chown(slot.work, slot.uid, slot.uid)
    st = os.stat(slot.work)
    if st.st_uid != slot.uid or st.st_mode & 0o077:
        raise BackendUnavailable(f"inline workspace {slot.work} must be owned by uid {slot.uid} with mode 0700, "
                                 f"found uid {st.st_uid} mode {oct(st.st_mode & 0o777)}; mount it with slot_mounts()")


def _as_uid(uid: int, limits: Limits | None):
    """A preexec function: a new session, OOM-kill first, then become `uid` with no groups.

    A uid slot ends with no capabilities (the kernel drops them when root becomes another uid); the root slot
    stays root with the container's capabilities.
    """

    def apply() -> None:
        os.setsid()
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        except OSError:
            pass
        if limits is not None:
            import resource

            for name, value in command_rlimits(limits, root=uid == 0).items():
                if name in ("RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_CORE"):
                    resource.setrlimit(getattr(resource, name), (value, value))
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)

    return apply


def _spawn(argv: list[str], slot: Slot, limits: Limits | None, stdout: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=stdout, close_fds=True,
                            stderr=sys.stderr if os.environ.get("AGENTGYM_SANDBOX_DEBUG") else subprocess.DEVNULL,
                            preexec_fn=_as_uid(slot.uid, limits))  # no cwd: the agent chdirs itself, as the slot
    CHILDREN.add(proc.pid)
    return proc


def _reaped(proc: subprocess.Popen[bytes]) -> None:
    CHILDREN.discard(proc.pid)


def clean_slot(slot: Slot, timeout_s: float = 30.0) -> None:
    """Kill the slot's processes and wipe its workspace and scratch files, from a cleaner running as the slot.

    The cleaner is the agent itself in its ``clean_only`` mode. For a uid slot, kill(-1) as the uid reaches
    exactly the uid's processes, so the server needs no CAP_KILL, and the uid owns everything it deletes. For
    the root slot, kill(-1) reaches every process but pid 1, which is the server.
    """
    proc = _spawn(agent_command(_python(), slot.config(clean_only=True)), slot, None, subprocess.DEVNULL)
    try:
        proc.communicate(AGENT_SOURCE, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    finally:
        _reaped(proc)


def _python() -> str:
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


class InlineHandle:
    """Kill and post-mortem for one slot: the agent and every process of its uid."""

    def __init__(self, proc: subprocess.Popen[bytes], slot: Slot):
        self.proc, self.slot = proc, slot
        self.id = f"inline-{'root' if slot.is_root else slot.n}-{uuid.uuid4().hex[:8]}"
        self._done = False

    def kill(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            clean_slot(self.slot)
            self.proc.wait(timeout=10)
        finally:
            _reaped(self.proc)
            _give_back(self.slot)

    def death_report(self) -> tuple[bool, str]:
        return process_death_report(self.proc, f"inline agent {self.proc.pid} ({self.id})")


def open_inline(image: str, *, limits: Limits, network: bool, workdir: str,
                privileges: Privileges | None = None) -> Sandbox:
    """Start an agent in a free slot and wait for its hello.

    A uid slot's workdir is its own workspace, not `workdir`. `privileges=Privileges.container_root()` takes the
    root slot instead: `workdir` (a tmpfs of the image's profile) and /tmp, as root with the container's
    capabilities; only a server that is its container's pid 1 may do that (see `unavailable_reason`).
    """
    root = privileges is not None and not privileges.is_default
    reason = unavailable_reason(root=root)
    if reason is not None:
        raise BackendUnavailable(f"the inline backend cannot run here: {reason}")
    if network:
        raise BackendUnavailable("the inline backend has no network to give (the family container runs with "
                                 "--network none); use backend='docker' with network=True")
    if root and privileges is not None and privileges.uid != 0:
        raise BackendUnavailable(f"inline sandboxes run as a slot uid or as root; privileges={privileges} is neither")
    with _claiming(root):  # until the agent runs as the slot's uid, which marks the slot taken for every process
        slot = _take_slot(workdir if root else None)
        try:
            _check_workspace(slot)
            clean_slot(slot)  # whatever an earlier owner of the slot left behind
            proc = _spawn(agent_command(_python(), slot.config(limits)), slot, limits, subprocess.PIPE)
        except BaseException:
            _give_back(slot)
            raise
    sandbox = Sandbox(channel=Channel(popen_pipes(proc)), handle=InlineHandle(proc, slot), image=image,
                      backend="inline", limits=limits, workdir=slot.work, network=False)
    sandbox.start(START_TIMEOUT_S)
    return sandbox


def reap_orphans(interval_s: float = 0.5) -> None:
    """For a server that is its container's pid 1 (a root-sandbox image): collect the zombies of processes the
    model left behind (orphans are reparented to pid 1), never those of this server's own subprocesses, in a
    daemon thread."""

    def loop() -> None:
        while True:
            time.sleep(interval_s)
            for pid in map(int, filter(str.isdigit, os.listdir("/proc"))):
                if pid in CHILDREN or pid == os.getpid():
                    continue
                fields = stat_fields(pid)
                if fields is not None and fields[0] == "Z" and int(fields[1]) == os.getpid():
                    with contextlib.suppress(ChildProcessError):
                        os.waitpid(pid, os.WNOHANG)

    threading.Thread(target=loop, name="agentgym-orphan-reaper", daemon=True).start()
