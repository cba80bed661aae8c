"""The soak's served policy: `agentgym serve` behind a seeded, logged, fault-injecting HTTP proxy.

    server = start_policy_server(model_dir, work, tag)             # agentgym serve, dies with the driver
    proxy = PolicyFaultProxy(server_port, fault_log, seed=0, fault_rate=0.04, outage_rate=0.02, stall_s=16.0)
    url = proxy.start()                                            # the run's backend_url is f"{url}/v1"

The proxy relays HTTP/1.1 (keep-alive on the client side, one fresh upstream connection per request) and
injects faults into generation requests only (``POST .../completions`` carrying an ``X-Agentgym-Episode``
header); weight sync, ``/v1/models``, ``/health`` and releases always pass. Each fault is appended (fsynced)
to the fault log *before* it acts, with the episode id, so the accounting can match it to a stored episode:

- ``policy_500``: answer HTTP 500 without asking the server;
- ``policy_drop``: hand the request to the server, read its answer's head, then close the client's
  connection without a byte (the server did the work; the client sees the connection dropped mid-request);
- ``policy_stall``: answer nothing for ``stall_s`` (past the client's timeout), then close.

Per generation request, one draw from ``random.Random(f"{seed}:policy")`` (in arrival order) picks:
an **outage** (``outage_rate``): every request of that episode from now on gets the same fault, so the
client's retries run out and the episode must end as an infra failure (``policy failed: ...``); or an
**isolated** fault (``fault_rate``): this one request only. The request after an isolated fault of the
same episode always passes, so a client that retries at least once absorbs every isolated fault.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import threading
import time
from pathlib import Path
from typing import Any

from soak_env import append_record

KINDS = ("policy_500", "policy_drop", "policy_stall")
EPISODE_HEADER = "x-agentgym-episode"
#: the requests whose answer says the server loaded new weights (save-and-reload, process group, shared memory)
LOADS = ("/agentgym/update_weights", "/agentgym/weights/receive", "/agentgym/weights/shm")


def start_policy_server(model_dir: str | Path, work: Path, tag: str, timeout_s: float = 300.0) -> Any:
    """`agentgym serve MODEL_DIR` on a free port (an `agentgym.launch.ServedProcess`) with the run's TMPDIR and
    soak tag (so the leak check sees what it leaves); SIGKILLed when the driver dies, like the trainer."""
    from agentgym.launch import free_port, launch

    port = free_port()
    command = [sys.executable, "-c", _SERVE_DYING_WITH_PARENT, "serve", str(model_dir), "--port", str(port)]
    return launch(command, port, what="the soak's agentgym serve", timeout_s=timeout_s,
                  env={"TMPDIR": str(work / "tmp"), "AGENTGYM_SOAK_TAG": tag})


#: ``python -m agentgym`` after PR_SET_PDEATHSIG (SIGKILL when the driver dies)
_SERVE_DYING_WITH_PARENT = ("import ctypes, runpy, sys; ctypes.CDLL(None).prctl(1, 9, 0, 0, 0); sys.argv[0] = 'agentgym'; "
                            "runpy.run_module('agentgym', run_name='__main__', alter_sys=True)")


class PolicyFaultProxy:
    """The fault-injecting reverse proxy (see the module docstring); runs its own event loop in a daemon thread."""

    def __init__(self, upstream_port: int, fault_log: Path, *, seed: int, fault_rate: float, outage_rate: float,
                 stall_s: float):
        if not 0 <= fault_rate + outage_rate <= 1:
            raise ValueError(f"fault_rate + outage_rate must lie in [0, 1], got {fault_rate} + {outage_rate}")
        self.upstream_port, self.fault_log, self.stall_s = upstream_port, str(fault_log), stall_s
        self.fault_rate, self.outage_rate = fault_rate, outage_rate
        self._rng = random.Random(f"{seed}:policy")
        self._outages: dict[str, str] = {}  #: episode id -> the fault every request of it gets
        self._just_faulted: set[str] = set()  #: episodes whose last request got an isolated fault
        self.requests = 0  #: generation requests seen
        self._hold: threading.Event | None = None  #: set when the next weight load has been held (see hold_next_load)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="soak-policy-proxy", daemon=True)
        self._server: asyncio.AbstractServer | None = None

    def start(self) -> str:
        """Listen on a free port of 127.0.0.1; returns ``http://127.0.0.1:PORT``."""
        self._thread.start()
        started = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._serve, "127.0.0.1", 0, limit=1 << 20), self._loop)
        self._server = started.result(timeout=30)
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def stop(self) -> None:
        """Close the listener and every connection (stalled ones included), then end the thread."""
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for _ in range(5):  # a connection accepted just before the close starts its task a little later
                tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await asyncio.sleep(0.05)

        if self._thread.is_alive():
            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=30)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=30)
            self._loop.close()

    def hold_next_load(self) -> threading.Event:
        """Relay the next weight load (`LOADS`) to the server but never its answer to the trainer; the event
        is set once the server has loaded those weights. The trainer, still waiting on its push, has not
        checkpointed them: a kill now leaves the server a version ahead of the last checkpoint."""
        self._hold = threading.Event()
        return self._hold

    # ---- one client connection: requests in turn (HTTP/1.1 keep-alive) ---------------------------
    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return  # the client closed its connection
                method, path, headers = _parse_request(head)
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                fault = self._decide(method, path, headers)
                if self._hold is not None and path in LOADS:
                    hold, self._hold = self._hold, None
                    await self._relay(head + body)
                    hold.set()
                    await reader.read()  # the answer is never sent: wait for the trainer's end (it is killed)
                    return
                elif fault is None:
                    writer.write(await self._relay(head + body))
                elif not await self._inject(fault, head + body, writer):
                    return
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the client went away, or the proxy is stopping (a cancelled stall)
        finally:
            writer.close()

    def _decide(self, method: str, path: str, headers: dict[str, str]) -> dict[str, Any] | None:
        """The fault for this request (logged before it acts), or None to relay it."""
        episode = headers.get(EPISODE_HEADER)
        if method != "POST" or not path.endswith("/completions") or not episode:
            return None
        self.requests += 1
        if episode in self._outages:
            kind, outage = self._outages[episode], True
        elif episode in self._just_faulted:  # the client's retry of an isolated fault: it passes
            self._just_faulted.discard(episode)
            return None
        else:
            draw = self._rng.random()
            if draw >= self.outage_rate + self.fault_rate:
                return None
            kind, outage = self._rng.choice(KINDS), draw < self.outage_rate
            if outage:
                self._outages[episode] = kind
            else:
                self._just_faulted.add(episode)
        record = {"kind": kind, "episode_id": episode, "outage": outage, "path": path, "request": self.requests,
                  "time": time.time()}
        append_record(self.fault_log, record)
        return record

    async def _inject(self, fault: dict[str, Any], request: bytes, writer: asyncio.StreamWriter) -> bool:
        """Act out `fault`; True when the client's connection stays open."""
        if fault["kind"] == "policy_500":
            body = json.dumps({"error": {"message": f"injected by the soak ({fault['kind']})"}}).encode()
            writer.write(b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\n"
                         b"content-length: %d\r\n\r\n%s" % (len(body), body))
            return True
        if fault["kind"] == "policy_drop":
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            try:
                up_writer.write(request)
                await up_writer.drain()
                await up_reader.readuntil(b"\r\n\r\n")  # the server answered: drop the answer
            finally:
                up_writer.close()
            return False
        await asyncio.sleep(self.stall_s)  # policy_stall: the client times out meanwhile
        return False

    async def _relay(self, request: bytes) -> bytes:
        """Send one request to the server on a fresh connection; its whole answer, as received."""
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port, limit=1 << 20)
        try:
            up_writer.write(request)
            await up_writer.drain()
            head = await up_reader.readuntil(b"\r\n\r\n")
            headers = _parse_headers(head)
            if "content-length" in headers:
                return head + await up_reader.readexactly(int(headers["content-length"]))
            if headers.get("transfer-encoding", "").lower() == "chunked":
                return head + await _read_chunked(up_reader)
            return head + await up_reader.read()  # the server closes the connection at the answer's end
        finally:
            up_writer.close()


def _parse_request(head: bytes) -> tuple[str, str, dict[str, str]]:
    method, path, _version = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
    return method, path, _parse_headers(head)


def _parse_headers(head: bytes) -> dict[str, str]:
    headers = {}
    for line in head.decode("latin-1").split("\r\n")[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers[name.strip().lower()] = value.strip()
    return headers


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    data = b""
    while True:
        size_line = await reader.readuntil(b"\r\n")
        data += size_line
        size = int(size_line.split(b";")[0].strip(), 16)
        data += await reader.readexactly(size + 2)  # the chunk and its CRLF
        if size == 0:
            return data


def served_version(url: str) -> int:
    """The policy version the server serves now (``GET /health``), asked directly."""
    import httpx

    return int(httpx.get(f"{url}/health", timeout=30).json()["version"])


def served_weights(url: str) -> dict[str, Any]:
    """The server's policy version and weights digest (``GET /agentgym/weights/digest``), asked directly."""
    import httpx

    return httpx.get(f"{url}/agentgym/weights/digest", timeout=120).json()


def weight_sync_check(run_dir: Path, served: dict[str, Any]) -> dict[str, Any]:
    """Whether the server ended with the weights and version of the run's last checkpoint (the trainer pushed them
    after its last update, across the faults and the resumes)."""
    import torch

    from agentgym.policy.hf import HFBackend
    from agentgym.policy.weight_buckets import digest

    latest = run_dir / "checkpoints" / (run_dir / "checkpoints" / "latest").read_text().strip()
    version = torch.load(latest / "state.pt", map_location="cpu", weights_only=False)["policy_version"]
    saved = HFBackend.from_pretrained(str(latest / "policy"))
    return {"served_version": served["version"], "checkpoint": latest.name, "checkpoint_version": version,
            "digest_equal": digest(saved.model.state_dict()) == served["digest"]}
