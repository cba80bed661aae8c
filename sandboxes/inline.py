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
  CAP_DAC_OVERRIDE.

The container supplies what a uid cannot: ``--network none`` and the memory
and pid limits of the whole replica (docs/sandbox-security.md compares this
with the Docker backend). `open_inline` refuses to run where the process sees
a network interface other than loopback, unless AGENTGYM_INLINE_UNCONTAINED=1
says the caller knows (tests of the backend itself on a development host).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import uuid

from agentgym.sandboxes.channel import (
    AGENT_SOURCE,
    Channel,
    agent_command,
    popen_pipes,
    process_death_report,
)
from agentgym.sandboxes.errors import BackendUnavailable
from agentgym.sandboxes.limits import Limits
from agentgym.sandboxes.sandbox import Sandbox, agent_config

#: Where the slots' workspaces are (each a tmpfs the engine mounts; a plain directory outside a family image).
ROOT = os.environ.get("AGENTGYM_INLINE_ROOT", "/sandboxes")
FIRST_UID = int(os.environ.get("AGENTGYM_INLINE_FIRST_UID", "20000"))
SLOTS = int(os.environ.get("AGENTGYM_INLINE_SLOTS", "48"))
START_TIMEOUT_S = 30.0
SCRUB = ("/tmp", "/dev/shm")
NOFILE = 256

_lock = threading.Lock()
_free: list[int] = []
_taken: set[int] = set()

def slot_mounts(slots: int, size: str = "64m", root: str = ROOT) -> dict[str, str]:
    """The tmpfs mounts (path -> options) a family container needs: one workspace per slot, `size` each."""
    return {f"{root}/{n}": f"size={size},uid={FIRST_UID + n},gid={FIRST_UID + n},mode=0700" for n in range(slots)}


def command_rlimits(limits: Limits) -> dict[str, int]:
    """The rlimits of every command of a slot (the agent applies them before exec)."""
    return {
        "RLIMIT_CPU": math.ceil(limits.exec_timeout_s) * 2,
        "RLIMIT_AS": limits.memory_bytes,
        "RLIMIT_NPROC": limits.pids,
        "RLIMIT_FSIZE": limits.disk_bytes,
        "RLIMIT_NOFILE": NOFILE,
        "RLIMIT_CORE": 0,
    }


def unavailable_reason() -> str | None:
    """None when this process can run inline sandboxes, else why not."""
    if not hasattr(os, "setuid"):
        return "the inline backend needs a POSIX system"
    if os.environ.get("AGENTGYM_INLINE_UNCONTAINED") != "1":
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


def _take_slot() -> int:
    with _lock:
        for n in range(SLOTS):
            if n not in _taken:
                _taken.add(n)
                return n
    raise BackendUnavailable(f"all {SLOTS} inline sandbox slots are in use; lower the pool sizes or raise "
                             "AGENTGYM_INLINE_SLOTS (the family container mounts one workspace per slot)")


def _give_back(slot: int) -> None:
    with _lock:
        _taken.discard(slot)


def _workspace(slot: int) -> str:
    """The slot's workspace: the engine's tmpfs in a family container, else made here (tests on a host)."""
    path, uid = os.path.join(ROOT, str(slot)), FIRST_UID + slot
    if not os.path.isdir(path):
        os.makedirs(path, mode=0o700)
        os.chown(path, uid, uid)
    st = os.stat(path)
    if st.st_uid != uid or st.st_mode & 0o077:
        raise BackendUnavailable(f"inline workspace {path} must be owned by uid {uid} with mode 0700, found uid "
                                 f"{st.st_uid} mode {oct(st.st_mode & 0o777)}; mount it with slot_mounts()")
    return path


def _as_uid(uid: int, limits: Limits | None):
    """A preexec function: a new session, OOM-kill first, then become `uid` with no groups and no capabilities."""

    def apply() -> None:
        os.setsid()
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        except OSError:
            pass
        if limits is not None:
            import resource

            for name in ("RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_CORE"):
                value = command_rlimits(limits)[name]
                resource.setrlimit(getattr(resource, name), (value, value))
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)

    return apply


def clean_slot(slot: int, timeout_s: float = 30.0) -> None:
    """Kill every process of the slot's uid and wipe its workspace and scratch files, as that uid.

    The cleaner is the agent itself in its ``clean_only`` mode: kill(-1) as the uid reaches exactly the uid's
    processes, so the server needs no CAP_KILL, and the uid owns everything it has to delete.
    """
    config = {"clean_only": True, "kill_scope": "uid", "writable": [os.path.join(ROOT, str(slot))],
              "scrub": list(SCRUB)}
    proc = subprocess.Popen(agent_command(_python(), config), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, close_fds=True, preexec_fn=_as_uid(FIRST_UID + slot, None))
    try:
        proc.communicate(AGENT_SOURCE, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _python() -> str:
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


class InlineHandle:
    """Kill and post-mortem for one slot: the agent and every process of its uid."""

    def __init__(self, proc: subprocess.Popen[bytes], slot: int):
        self.proc, self.slot = proc, slot
        self.id = f"inline-{slot}-{uuid.uuid4().hex[:8]}"
        self._done = False

    def kill(self) -> None:
        if self._done:
            return
        self._done = True
        try:
            clean_slot(self.slot)
            self.proc.wait(timeout=10)
        finally:
            _give_back(self.slot)

    def death_report(self) -> tuple[bool, str]:
        return process_death_report(self.proc, f"inline agent {self.proc.pid} (slot {self.slot})")


def open_inline(image: str, *, limits: Limits, network: bool, workdir: str) -> Sandbox:
    """Start an agent in a free slot and wait for its hello; `workdir` is replaced by the slot's workspace."""
    reason = unavailable_reason()
    if reason is not None:
        raise BackendUnavailable(f"the inline backend cannot run here: {reason}")
    if network:
        raise BackendUnavailable("the inline backend has no network to give (the family container runs with "
                                 "--network none); use backend='docker' with network=True")
    slot = _take_slot()
    try:
        work = _workspace(slot)
        clean_slot(slot)  # whatever an earlier owner of the slot left behind
        config = agent_config(work, limits, [work])
        config["env"].update(HOME=work, TMPDIR=work, USER=f"sandbox{slot}")
        config.update(rlimits=command_rlimits(limits), kill_scope="uid", scrub=list(SCRUB))
        proc = subprocess.Popen(agent_command(_python(), config), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=sys.stderr if os.environ.get("AGENTGYM_SANDBOX_DEBUG") else subprocess.DEVNULL,
                                close_fds=True, preexec_fn=_as_uid(FIRST_UID + slot, limits))  # the agent chdirs itself
    except BaseException:
        _give_back(slot)
        raise
    sandbox = Sandbox(channel=Channel(popen_pipes(proc)), handle=InlineHandle(proc, slot), image=image,
                      backend="inline", limits=limits, workdir=work, network=False)
    sandbox.start(START_TIMEOUT_S)
    return sandbox
