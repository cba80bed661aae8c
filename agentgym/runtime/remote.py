"""`RemoteEnv`: an env served by ``agentgym envs serve``, used like a local one.

    env = agentgym.make("http://127.0.0.1:8000/Maze-v0")          # or RemoteEnv(url)
    env = agentgym.make("http+unix://%2Frun%2Fenv%2Fenv.sock/SQL-v0")  # a server on a unix socket

The URL's path is the env id (namespaces kept: ``/MyNs/Name-v0``); the server
checks it and the protocol version when the session opens. Construction reads
``/v1/info`` (system prompt, tools, action format, task ids); the first
`reset` opens a session (one env instance on the server) and a WebSocket to
it, over which every call then goes.

Every env call carries `call_timeout_s` (the collector passes its
``turn_timeout_s``): the server ends a call that passes it like a local
worker's, killing the session's worker process, closing the session (its slot
is free at once) and answering ``env_infra`` with kind ``env_timeout``. The
client waits `CALL_GRACE_S` longer for that answer before it gives up itself
(kind ``timeout``; an older server does not enforce the limit). Opening a
session starts a worker process on the server, which can take long on a busy
machine: it has its own limit, `open_timeout_s`, as does the handshake.

Faults are typed: a refused connection, a dropped connection (server killed
or restarted), a reply that does not come in time, a full server (``busy``) or
a session closed on the server all raise `EnvInfraError` (kinds
``connection_refused``, ``connection_lost``, ``timeout``, ``busy``,
``session_lost``), so the collector ends only that episode, as an
infrastructure failure. The next `reset` opens a new session. A protocol
version or env id mismatch is a `ConfigError`, raised at construction.

`usage()` is what this env's sessions used on the server so far (CPU seconds
of their worker processes, their peak memory), from the ``usage`` the server
sends with every reply: the collector's cost measure reads it as it reads a
local worker's /proc (`agentgym.cost.env_usage`). None when the server does
not report it (an env in the server's own process, or an older server).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
import urllib.parse
from typing import Any

from agentgym.errors import ConfigError, EnvInfraError, require
from agentgym.runtime.protocol import PROTOCOL_VERSION, exception_from_error
from agentgym.runtime.proxy import ProxyEnv

URL_SCHEMES = ("http://", "https://", "http+unix://")
#: how much longer than a call's limit the client waits for the server's answer (the server ends the call)
CALL_GRACE_S = 5.0


def is_env_url(env_id: str) -> bool:
    """Whether `env_id` is the URL of an env server rather than a registered id."""
    return isinstance(env_id, str) and env_id.startswith(URL_SCHEMES)


def parse_env_url(url: str) -> tuple[str, str | None, str | None]:
    """(HTTP base URL, unix socket path or None, env id or None) of an env server URL."""
    parts = urllib.parse.urlsplit(url)
    env_id = parts.path.strip("/") or None
    if parts.scheme == "http+unix":
        socket_path = urllib.parse.unquote(parts.netloc)
        if not socket_path.startswith("/"):
            raise ConfigError(f"env URL {url!r}: write the socket path percent-encoded, e.g. "
                              "http+unix://%2Frun%2Fagentgym%2Fenv.sock/Maze-v0")
        return "http://agentgym-env", socket_path, env_id
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"env URL {url!r} must look like http://HOST:PORT/ENV_ID or http+unix://SOCKET/ENV_ID")
    return f"{parts.scheme}://{parts.netloc}", None, env_id


class RemoteEnv(ProxyEnv):
    """An `AgentEnv` on an env server; see the module docstring."""

    def __init__(self, url: str, *, call_timeout_s: float | None = 60.0, open_timeout_s: float | None = 300.0,
                 connect_timeout_s: float = 10.0, render_mode: str | None = None):
        self.call_timeout_s = call_timeout_s
        self.open_timeout_s = open_timeout_s
        self._connect_timeout_s = connect_timeout_s
        self._ws: Any = None
        self._session: str | None = None
        self._ids = itertools.count()
        self._lock = threading.Lock()
        self._cpu_done = 0.0  #: CPU seconds of this env's earlier sessions
        self._cpu_open: float | None = None  #: the current session's worker CPU seconds when it opened ...
        self._cpu_now: float | None = None  #: ... and at its last reply
        self._peak_mb = 0.0
        info = self._connect(url)
        super().__init__(info["env"], render_mode=render_mode)

    def _connect(self, url: str) -> dict[str, Any]:
        """Point this client at `url` and do the handshake; the handshake's reply."""
        httpx = require("httpx", extra="serve", what="RemoteEnv")
        self.url = url
        self._base, self._socket, self._env_id = parse_env_url(url)
        transport = httpx.HTTPTransport(uds=self._socket) if self._socket else None
        self._http = httpx.Client(base_url=self._base, transport=transport,
                                  timeout=httpx.Timeout(self.open_timeout_s, connect=self._connect_timeout_s))
        info = self._handshake()
        self.env_id = info["env_id"]
        self.server_id = info["server_id"]
        self.max_sessions = int(info.get("max_sessions") or 0) or None
        self.reports_usage = bool(info.get("reports_usage"))  # an older server: False
        return info

    def move_to(self, url: str) -> None:
        """Use another server of the same env from the next `reset` on (a replica replaced its dead twin)."""
        with self._lock:
            self._drop_session(delete=True)
            with contextlib.suppress(Exception):
                self._http.close()
            info = self._connect(url)
        if info["env"] != self.description:
            raise ConfigError(f"{url} serves a differently configured env than {self.url} did; a pool's "
                              "replicas must all serve the same env with the same settings")

    # ---- connection -----------------------------------------------------------------
    def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        import httpx

        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.ConnectError as exc:
            raise EnvInfraError(f"cannot connect to the env server at {self.url}: {exc}",
                                kind="connection_refused") from None
        except httpx.TimeoutException as exc:
            raise EnvInfraError(f"the env server at {self.url} did not answer {method} {path} within "
                                f"{self.open_timeout_s} s (our timeout): {exc}", kind="timeout") from None
        except httpx.TransportError as exc:
            raise EnvInfraError(f"the connection to the env server at {self.url} broke during {method} {path}: "
                                f"{exc}", kind="connection_lost") from None
        try:
            body = response.json()
        except ValueError:
            body = {"raw": response.text[:200]}
        if response.status_code >= 400:
            raise exception_from_error(body, self.url)
        return body

    def _handshake(self) -> dict[str, Any]:
        info = self._request("GET", "/v1/info")
        if info.get("protocol") != PROTOCOL_VERSION:
            raise ConfigError(f"the env server at {self.url} speaks env protocol {info.get('protocol')!r}, this "
                              f"client {PROTOCOL_VERSION}; use the same agentgym version on both sides")
        if self._env_id is not None and info.get("env_id") != self._env_id:
            raise ConfigError(f"the env server at {self.url} serves {info.get('env_id')!r}, not {self._env_id!r}; "
                              "fix the URL's path")
        return info

    def _open_session(self) -> None:
        body = self._request("POST", "/v1/sessions", json={"protocol": PROTOCOL_VERSION, "env_id": self.env_id})
        self._session = body["session_id"]
        if body.get("server_id") != self.server_id:
            self.server_id = body.get("server_id")  # the server restarted since the handshake: a new one answers
        self._note_usage(body.get("usage"))  # the worker's start up to here is the session's, not an episode's
        self._ws = self._connect_ws(self._session)

    def _connect_ws(self, session: str) -> Any:
        client = require("websockets.sync.client", extra="serve", what="RemoteEnv")
        from websockets.exceptions import WebSocketException
        path = f"/v1/sessions/{session}/ws"
        options = {"open_timeout": self._connect_timeout_s, "max_size": 64 * 1024 * 1024, "compression": None}
        try:
            if self._socket:
                ws = client.unix_connect(self._socket, f"ws://agentgym-env{path}", **options)
            else:
                ws = client.connect(self._base.replace("http", "ws", 1) + path, **options)
            return ws.__enter__()  # the connection stays open until _drop_session closes it
        except (OSError, TimeoutError, WebSocketException) as exc:  # a server that died mid-handshake: the latter
            raise EnvInfraError(f"cannot open the WebSocket of session {session} at the env server at {self.url}: "
                                f"{type(exc).__name__}: {exc}", kind="connection_refused") from None

    def _drop_session(self, delete: bool) -> None:
        ws, session, self._ws, self._session = self._ws, self._session, None, None
        if self._cpu_open is not None and self._cpu_now is not None:
            self._cpu_done += max(0.0, self._cpu_now - self._cpu_open)
        self._cpu_open = self._cpu_now = None
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.close()
        if delete and session is not None:
            with contextlib.suppress(Exception):
                self._http.delete(f"/v1/sessions/{session}", timeout=2.0)

    # ---- calls -----------------------------------------------------------------------
    def _call(self, method: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if self._ws is None:
                if method != "reset":
                    raise EnvInfraError(f"no open session at the env server at {self.url} (it was lost or closed); call reset() to "
                                        "open a new one", kind="session_lost")
                self._open_session()
            reply = self._exchange({"id": next(self._ids), "method": method, "args": list(args), "kwargs": kwargs,
                                    "timeout_s": self.call_timeout_s})
            self._note_usage(reply.get("usage"))
            if "error" in reply:
                error = exception_from_error(reply, self.url)
                closed = isinstance(reply["error"], dict) and reply["error"].get("session_closed")
                if closed or (isinstance(error, EnvInfraError) and error.kind == "session_lost"):
                    self._drop_session(delete=False)  # the next reset opens a new session
                raise error
        return reply["result"]

    def _note_usage(self, usage: Any) -> None:
        """Keep what the server reported the session's worker used (a reply's ``usage``)."""
        if not isinstance(usage, dict) or not isinstance(usage.get("cpu_s"), int | float):
            return
        self._cpu_now = float(usage["cpu_s"])
        if self._cpu_open is None:  # the session's first report (its opening's): counted from here
            self._cpu_open = self._cpu_now
        if isinstance(usage.get("peak_mb"), int | float):
            self._peak_mb = max(self._peak_mb, float(usage["peak_mb"]))

    def usage(self) -> tuple[float, float] | None:
        """(CPU seconds, peak resident MB) this env's sessions used on the server so far (see the module
        docstring); zero before the first session; None when the server does not report usage."""
        if not self.reports_usage:
            return None
        now, opened = self._cpu_now, self._cpu_open  # no lock: the collector asks from its event loop
        return self._cpu_done + (now - opened if now is not None and opened is not None else 0.0), self._peak_mb

    def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        from websockets.exceptions import ConnectionClosed

        wait = None if self.call_timeout_s is None else self.call_timeout_s + CALL_GRACE_S
        try:
            self._ws.send(json.dumps(message))
            text = self._ws.recv(timeout=wait)
        except TimeoutError:
            self._drop_session(delete=True)
            raise EnvInfraError(f"the env server at {self.url} did not answer {message['method']} within "
                                f"{wait:g} s (our timeout)", kind="timeout") from None
        except (ConnectionClosed, OSError) as exc:
            self._drop_session(delete=False)
            raise EnvInfraError(f"the connection to the env server at {self.url} was lost during "
                                f"{message['method']} (server stopped, restarted or crashed): {exc}",
                                kind="connection_lost") from None
        try:
            reply = json.loads(text)
        except json.JSONDecodeError:
            reply = None
        if isinstance(reply, dict):
            return reply
        self._drop_session(delete=True)
        raise EnvInfraError(f"the env server at {self.url} sent a reply that is not a JSON object: {text[:200]!r}",
                            kind="bad_reply")

    def state(self) -> dict[str, Any]:
        """The server's view of this session's episode: task, steps, return, done flags, fingerprint, idle time.

        Answered by the server without touching the env (useful to see where a session stands after a
        reconnect, or what a server holds); before the first `reset` there is no session to ask.
        """
        return self._call("state")

    def close(self) -> None:
        """Close the session on the server and the connections; idempotent."""
        with self._lock:
            self._drop_session(delete=True)
            with contextlib.suppress(Exception):
                self._http.close()
        super().close()
