"""The in-sandbox agent: a small stdlib-only server that is the sandbox's main process.

The host starts ``python3 -I -S -c <bootstrap> <size> <config json>`` inside the
container (or the bwrap namespace) and sends this file's source on stdin, so
images need nothing but python3 and the agent always matches the host
library's version. It serves
requests on stdin/stdout until stdin closes, which happens when the owning
host process goes away, so a sandbox never outlives its owner for long.

Wire format, both directions: a 4-byte big-endian length, then UTF-8 JSON.
Binary payloads travel base64-encoded. Requests carry ``op``; every reply has
``ok`` and, when ``ok`` is false, ``error`` and ``kind``.

Ops: ``exec`` (run a command with timeout, output cap and OOM detection),
``write``, ``read``, ``snapshot`` / ``restore`` (tar of the writable dirs),
``ping``. Commands run in their own session so a timeout kills the whole
process group; ``restore`` also kills every other process of the sandbox.

This file must stay importable-free of the ``sandboxes`` package and run on
the Python 3.11 of Debian bookworm.
"""

import base64
import errno
import fcntl
import io
import json
import os
import resource
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tarfile
import time

STDIN_FD, STDOUT_FD = 0, 1
GRACE_AFTER_EXIT_S = 0.05  # how long to wait for pipes held open by background children
CHUNK = 65536


def read_exact(n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(STDIN_FD, n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def receive():
    (size,) = struct.unpack(">I", read_exact(4))
    return json.loads(read_exact(size))


def send(obj):
    data = json.dumps(obj, separators=(",", ":")).encode()
    view = memoryview(struct.pack(">I", len(data)) + data)
    while view:
        view = view[os.write(STDOUT_FD, view) :]


def b64(data):
    return base64.b64encode(data).decode("ascii")


def oom_kill_count():
    """The cgroup's OOM-kill counter (v2, then v1), or None when it cannot be read."""
    for path in ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control"):
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


SCOPE = {"uid": None}  # set from the config: the inline backend's agent kills only its own uid's processes


def mine(pid):
    """True when `pid` is in this sandbox: any process, or with kill_scope "uid" one of this agent's uid."""
    if SCOPE["uid"] is None:
        return True
    try:
        return os.stat(f"/proc/{pid}").st_uid == SCOPE["uid"]
    except OSError:
        return False


def kill_others():
    """SIGKILL every process of the sandbox except this agent and its ancestors."""
    if SCOPE["uid"] is not None:  # the inline backend: kill(-1) reaches exactly this uid's other processes
        keep = {os.getpid()}
    else:
        keep = ancestors()
    if keep == {os.getpid(), 1} or SCOPE["uid"] is not None:  # only init above us (or only our uid reachable):
        try:  # kill(-1) reaches every other process at once, and the kernel lets no fork slip past it
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
    # Freeze, then kill, until a pass finds nothing: a stopped process cannot fork, so a fork bomb cannot
    # refill the pid slots a kill-only pass frees.
    for _ in range(50):
        others = [pid for pid in sandbox_pids(keep) if alive(pid)]
        if not others:
            break
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in others:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
    await_reaped(keep)


def await_reaped(keep, wait_s=2.0):
    """Wait (at most `wait_s`) until the killed processes are gone from /proc, not only dead: their parent (the
    sandbox's init) collects the zombies asynchronously, and a loaded host can make that lag behind the kill,
    so an exec right after a reset would still see them."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and sandbox_pids(keep):
        time.sleep(0.01)


def sandbox_pids(keep):
    """The pids in /proc of this sandbox's processes (zombies included) but those in `keep`."""
    return [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if pid not in keep and mine(pid)]


def ancestors():
    """This agent's pid, its ancestors' and init's."""
    keep = {os.getpid()}
    pid = os.getpid()
    while pid > 1:
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
        keep.add(pid)
    keep.add(1)
    return keep


def alive(pid):
    """True for a process that is not a zombie (a zombie only waits for its parent to collect it)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


class Capped:
    """Keeps the first `cap` bytes of a stream and counts the rest."""

    def __init__(self, cap):
        self.cap, self.data, self.dropped = cap, bytearray(), 0

    def add(self, chunk):
        room = self.cap - len(self.data)
        if room > 0:
            self.data += chunk[:room]
        self.dropped += max(0, len(chunk) - max(room, 0))


def pump(proc, stdin_data, outs, deadline):
    """Feed stdin, drain stdout/stderr until EOF or the deadline; return True on timeout."""
    sel = selectors.DefaultSelector()
    streams = {proc.stdout: outs[0], proc.stderr: outs[1]}
    for stream in streams:
        sel.register(stream, selectors.EVENT_READ)
    pending = memoryview(stdin_data or b"")
    if proc.stdin is not None:
        fcntl.fcntl(proc.stdin, fcntl.F_SETFL, fcntl.fcntl(proc.stdin, fcntl.F_GETFL) | os.O_NONBLOCK)
        if pending:
            sel.register(proc.stdin, selectors.EVENT_WRITE)
        else:
            proc.stdin.close()
    exited_at = None
    try:
        while streams:
            now = time.monotonic()
            if now >= deadline:
                return True
            wait = min(deadline - now, 0.05)
            if exited_at is not None:
                if now >= exited_at + GRACE_AFTER_EXIT_S:
                    return False
                wait = min(wait, exited_at + GRACE_AFTER_EXIT_S - now)
            for key, _ in sel.select(wait):
                if key.fileobj is proc.stdin:
                    try:
                        pending = pending[os.write(proc.stdin.fileno(), pending[:CHUNK]) :]
                    except BrokenPipeError:
                        pending = memoryview(b"")
                    if not pending:
                        sel.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(key.fileobj.fileno(), CHUNK)
                if chunk:
                    streams[key.fileobj].add(chunk)
                else:
                    sel.unregister(key.fileobj)
                    del streams[key.fileobj]
            if exited_at is None and proc.poll() is not None:
                exited_at = time.monotonic()
        return False
    finally:
        sel.close()


def child_setup(rlimits):
    """A preexec function for a command: the OOM killer's first choice (``oom_score_adj`` 1000, inherited by
    everything it forks, so a memory bomb dies before this agent, which the sandbox cannot lose), then `rlimits`
    (local backend: no cgroup)."""

    def apply():
        try:
            with open("/proc/self/oom_score_adj", "w") as f:
                f.write("1000")
        except OSError:
            pass
        for name, value in (rlimits or {}).items():
            resource.setrlimit(getattr(resource, name), (value, value))

    return apply


def op_exec(req, cfg):
    argv, timeout = req["argv"], float(req["timeout"])
    stdin_data = base64.b64decode(req["stdin"]) if req.get("stdin") is not None else None
    env = dict(cfg["env"])
    env.update(req.get("env") or {})
    cwd = req.get("cwd") or cfg["workdir"]
    outs = (Capped(int(req["cap"])), Capped(int(req["cap"])))
    oom_before = oom_kill_count()
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if stdin_data is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=cwd,
            env=env,
            start_new_session=True,
            preexec_fn=child_setup(cfg.get("rlimits")),
        )
    except OSError as exc:
        code = 127 if exc.errno == errno.ENOENT else 126
        return {"ok": True, "exit_code": code, "stdout": "", "stderr": b64(str(exc).encode()),
                "error": f"could not start {argv[0]!r}: {exc}", "duration_s": 0.0}
    timed_out = pump(proc, stdin_data, outs, start + timeout)
    if timed_out:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    returncode = proc.wait()
    duration = time.monotonic() - start
    for stream in (proc.stdout, proc.stderr):
        stream.close()
    oom_after = oom_kill_count()
    return {
        "ok": True,
        "exit_code": returncode if returncode >= 0 else 128 - returncode,
        "stdout": b64(bytes(outs[0].data)),
        "stderr": b64(bytes(outs[1].data)),
        "stdout_dropped": outs[0].dropped,
        "stderr_dropped": outs[1].dropped,
        "timed_out": timed_out,
        "oom_killed": oom_before is not None and oom_after is not None and oom_after > oom_before,
        "duration_s": duration,
    }


def resolve(path, cfg):
    return path if os.path.isabs(path) else os.path.join(cfg["workdir"], path)


def op_write(req, cfg):
    for path, data in req["files"].items():
        full = resolve(path, cfg)
        parent = os.path.dirname(full)
        if parent:
            os.makedirs(parent, exist_ok=True)
        with open(full, "wb") as f:
            f.write(base64.b64decode(data))
        if req.get("mode") is not None:
            os.chmod(full, int(req["mode"]))
    return {"ok": True}


def op_read(req, cfg):
    with open(resolve(req["path"], cfg), "rb") as f:
        return {"ok": True, "data": b64(f.read())}


def op_snapshot(req, cfg):
    buf, mtimes = io.BytesIO(), {}
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for top in cfg["writable"]:
            mtimes[top] = os.lstat(top).st_mtime_ns
            for name in sorted(os.listdir(top)):
                full = os.path.join(top, name)
                tar.add(full, arcname=full.lstrip("/"), recursive=True)
                for root, dirs, files in os.walk(full) if os.path.isdir(full) and not os.path.islink(full) else ():
                    for entry in dirs + files:
                        path = os.path.join(root, entry)
                        mtimes[path] = os.lstat(path).st_mtime_ns
                mtimes[full] = os.lstat(full).st_mtime_ns
    return {"ok": True, "tar": b64(buf.getvalue()), "mtimes": mtimes}


def set_mtimes(mtimes):
    """Put back exact modification times, deepest paths first so parents end up right."""
    for path in sorted(mtimes, key=lambda p: p.count("/"), reverse=True):
        try:
            os.utime(path, ns=(mtimes[path], mtimes[path]), follow_symlinks=False)
        except OSError:
            pass  # e.g. the root-owned /tmp mount point itself


def wipe(top):
    for name in os.listdir(top):
        wipe_entry(os.path.join(top, name))


def wipe_entry(full):
    if os.path.isdir(full) and not os.path.islink(full):
        for root, dirs, _ in os.walk(full):  # make read-only dirs removable
            for d in dirs:
                try:
                    os.chmod(os.path.join(root, d), 0o700)
                except OSError:
                    pass
        os.chmod(full, 0o700)
        shutil.rmtree(full)
    else:
        os.unlink(full)


def scrub(cfg):
    """Remove what this uid left in shared scratch dirs (the inline backend's /tmp and /dev/shm)."""
    for top in cfg.get("scrub") or ():
        try:
            names = os.listdir(top)
        except OSError:
            continue
        for name in names:
            full = os.path.join(top, name)
            try:
                if os.lstat(full).st_uid == os.getuid():
                    wipe_entry(full)
            except OSError:
                pass


def clean(cfg):
    """The inline backend's cleaner (run as a slot's uid): kill the uid's processes, empty its dirs, exit."""
    kill_others()
    for top in cfg["writable"]:
        try:
            os.chmod(top, 0o700)
            for name in os.listdir(top):
                try:
                    wipe_entry(os.path.join(top, name))
                except OSError:
                    pass
        except OSError:
            pass
    scrub(cfg)


def op_restore(req, cfg):
    kill_others()
    for top in cfg["writable"]:
        wipe(top)
    scrub(cfg)
    if req.get("tar"):
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(req["tar"])), mode="r") as tar:
            for member in tar.getmembers():
                full = "/" + member.name
                if not any(full.startswith(top.rstrip("/") + "/") for top in cfg["writable"]):
                    raise ValueError(f"snapshot member {member.name!r} lies outside the writable dirs")
            trusted = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
            tar.extractall("/", numeric_owner=True, **trusted)  # members were checked just above
    set_mtimes(req.get("mtimes") or {})
    if req.get("rearm"):
        arm_lifetime(cfg)
    return {"ok": True}


def op_ping(req, cfg):
    return {"ok": True, "pid": os.getpid(), "uid": os.getuid()}


OPS = {"exec": op_exec, "write": op_write, "read": op_read, "snapshot": op_snapshot,
       "restore": op_restore, "ping": op_ping}


def on_lifetime_end(signum, frame):
    kill_others()
    os._exit(137)


def arm_lifetime(cfg):
    signal.setitimer(signal.ITIMER_REAL, float(cfg["lifetime_s"]))


def main():
    cfg = json.loads(sys.argv[-1])
    if cfg.get("kill_scope") == "uid":
        SCOPE["uid"] = os.getuid()
    if cfg.get("clean_only"):
        clean(cfg)
        return
    signal.signal(signal.SIGALRM, on_lifetime_end)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    arm_lifetime(cfg)
    os.chdir(cfg["workdir"])
    send({"ok": True, "pid": os.getpid(), "uid": os.getuid(), "oom_counter": oom_kill_count() is not None})
    while True:
        try:
            req = receive()
        except EOFError:
            break
        handler = OPS.get(req.get("op"))
        try:
            if handler is None:
                raise ValueError(f"unknown op {req.get('op')!r}")
            reply = handler(req, cfg)
        except Exception as exc:
            reply = {"ok": False, "kind": type(exc).__name__, "error": str(exc),
                     "errno": getattr(exc, "errno", None)}
        send(reply)
    kill_others()


if __name__ == "__main__":
    main()
