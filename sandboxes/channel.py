"""The host end of the agent protocol: length-prefixed JSON over a byte stream.

Two transports carry the frames: the Docker attach socket (where the engine
multiplexes stdout and stderr into 8-byte-headed frames) and the stdin/stdout
pipes of a local bwrap process.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import subprocess
import time
from pathlib import Path
from typing import Any, Protocol

AGENT_SOURCE = (Path(__file__).parent / "agent.py").read_bytes()
# The sandbox's command line: a few lines that read the agent's source from
# stdin and run it, so `ps` inside the sandbox shows a short command.
BOOTSTRAP = (
    "import os\n"
    "n=int(__import__('sys').argv[1]);b=b''\n"
    "while len(b)<n:\n"
    " c=os.read(0,n-len(b))\n"
    " if not c:raise SystemExit(3)\n"
    " b+=c\n"
    "exec(compile(b,'sandboxes/agent.py','exec'))\n"
)


def agent_command(python: str, config: dict[str, Any]) -> list[str]:
    """argv that starts the agent; send AGENT_SOURCE on its stdin right after it starts."""
    return [python, "-I", "-S", "-c", BOOTSTRAP, str(len(AGENT_SOURCE)), json.dumps(config)]


def popen_pipes(proc: subprocess.Popen[bytes]) -> Pipes:
    """The agent's pipes of a just-started local agent process, with its source already sent."""
    assert proc.stdin is not None and proc.stdout is not None
    pipes = Pipes(os.dup(proc.stdin.fileno()), os.dup(proc.stdout.fileno()))
    proc.stdin.close()
    proc.stdout.close()
    pipes.send(AGENT_SOURCE)
    return pipes


def process_death_report(proc: subprocess.Popen[bytes], what: str) -> tuple[bool, str]:
    """A `Handle.death_report` for a local agent process: `what` (e.g. "bwrap process 42") and how it ended."""
    try:
        code = proc.wait(timeout=2)  # its stdout closes a moment before the kernel reports the exit
    except subprocess.TimeoutExpired:
        return False, f"{what} is still running but its agent does not answer"
    how = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
    return False, f"{what} ended ({how})"


class ChannelClosed(Exception):
    """The agent's stream ended or stopped answering; the sandbox is dead."""


class Transport(Protocol):
    def send(self, data: bytes) -> None: ...

    def recv(self, deadline: float) -> bytes:
        """Some bytes of the agent's stdout; b'' at end of stream; TimeoutError past deadline."""
        ...

    def close(self) -> None: ...


class AttachSocket:
    """A hijacked `docker attach` socket with stdout/stderr multiplexing (no TTY)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self._raw = b""
        self.stderr = bytearray()  # the agent's own stderr, kept for death reports

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            raise ChannelClosed(f"writing to the sandbox failed: {exc}") from exc

    def _fill(self, n: int, deadline: float) -> bool:
        while len(self._raw) < n:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            self.sock.settimeout(remaining)
            try:
                chunk = self.sock.recv(1 << 20)
            except TimeoutError:
                raise
            except OSError:
                chunk = b""
            if not chunk:
                return False
            self._raw += chunk
        return True

    def recv(self, deadline: float) -> bytes:
        while True:
            if not self._fill(8, deadline):
                return b""
            kind, size = self._raw[0], struct.unpack(">I", self._raw[4:8])[0]
            if not self._fill(8 + size, deadline):
                return b""
            payload, self._raw = self._raw[8 : 8 + size], self._raw[8 + size :]
            if kind == 1:
                return payload
            self.stderr += payload[-4096:]
            del self.stderr[:-4096]

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class Pipes:
    """The stdin/stdout pipes of a local agent process."""

    def __init__(self, write_fd: int, read_fd: int):
        self.write_fd, self.read_fd = write_fd, read_fd

    def send(self, data: bytes) -> None:
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.write_fd, view) :]
        except OSError as exc:
            raise ChannelClosed(f"writing to the sandbox failed: {exc}") from exc

    def recv(self, deadline: float) -> bytes:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([self.read_fd], [], [], remaining)[0]:
            raise TimeoutError
        try:
            return os.read(self.read_fd, 1 << 20)
        except OSError:
            return b""

    def close(self) -> None:
        for fd in (self.write_fd, self.read_fd):
            try:
                os.close(fd)
            except OSError:
                pass


class Channel:
    """Request/reply calls to the agent over a transport; one call at a time."""

    def __init__(self, transport: Transport):
        self.transport = transport
        self._buf = bytearray()

    def _read(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            try:
                chunk = self.transport.recv(deadline)
            except TimeoutError:
                raise ChannelClosed("the sandbox stopped answering (host-side deadline passed)") from None
            if not chunk:
                raise ChannelClosed("the sandbox's agent exited")
            self._buf += chunk
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    def receive(self, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        (size,) = struct.unpack(">I", self._read(4, deadline))
        try:
            return json.loads(self._read(size, deadline))
        except ValueError as exc:
            raise ChannelClosed(f"the sandbox sent a malformed reply: {exc}") from exc

    def call(self, request: dict[str, Any], timeout: float) -> dict[str, Any]:
        data = json.dumps(request, separators=(",", ":")).encode()
        self.transport.send(struct.pack(">I", len(data)) + data)
        return self.receive(timeout)

    def close(self) -> None:
        self.transport.close()
