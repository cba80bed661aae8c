"""The env server: one registered env served over HTTP and WebSocket (``agentgym envs serve``).

    agentgym envs serve Maze-v0 --port 8000 --max-sessions 64
    env = agentgym.make("http://127.0.0.1:8000/Maze-v0")      # an AgentEnv like the local one

Endpoints, JSON shapes and error codes: docs/env-protocol.md. In short:
``GET /health``, ``GET /v1/info`` (the handshake: protocol version, env id,
system prompt, tool schemas, action format, task ids), ``POST /v1/sessions``
(a session is one env instance; 503 ``busy`` when every slot is taken),
``POST /v1/sessions/{id}/call`` and the faster ``WS /v1/sessions/{id}/ws``
(reset, step, snapshot, restore, solver_action, valid_actions; replies carry
the state fingerprint), ``DELETE /v1/sessions/{id}``. Sessions idle for
longer than ``idle_timeout_s`` are closed. A call may carry ``timeout_s``
(the client's turn limit; past it the session is closed and its worker
killed), and every reply carries ``usage``, what the session's worker
process used so far (null for an env in the server's own process).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from agentgym.cost import env_usage
from agentgym.errors import MissingExtraError, require
from agentgym.runtime.cgroup import cgroup_usage
from agentgym.runtime.dispatch import METHODS as ENV_METHODS
from agentgym.runtime.protocol import (
    HTTP_STATUS,
    PROTOCOL_VERSION,
    ErrorCode,
    error_body,
    error_from_exception,
    jsonable,
)
from agentgym.runtime.proxy import describe_env
from agentgym.runtime.sessions import Session, SessionManager

try:  # module level: FastAPI resolves the routes' annotations by name
    import fastapi
    from fastapi import Request, WebSocket, WebSocketDisconnect
    from fastapi.responses import JSONResponse
except ImportError as exc:  # pragma: no cover - a light install
    raise MissingExtraError("fastapi", "serve", "agentgym envs serve") from exc


#: what a session may call: the env methods, and `state` (answered by the server from what it saw)
METHODS = (*ENV_METHODS, "state")

class EnvServer:
    """The state behind the app: what is served, its description, its sessions."""

    def __init__(self, env_id: str, factory: Callable[[], Any], *, max_sessions: int = 64,
                 idle_timeout_s: float | None = 600.0, inline_fast_calls: bool = True, report_cgroup: bool = False):
        self.env_id = env_id
        self.server_id = uuid.uuid4().hex
        self.started = time.time()
        #: whether /health carries the cgroup's totals (only where the cgroup is the server's own: a container)
        self.report_cgroup = report_cgroup
        probe = factory()  # bad kwargs fail here, before the server listens
        try:
            self.description = jsonable(describe_env(probe))
            #: whether sessions run in processes of their own, whose usage the replies carry
            self.reports_usage = env_usage(probe) is not None
        finally:
            probe.close()
        self.sessions = SessionManager(factory, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s,
                                       inline_fast_calls=inline_fast_calls)

    def info(self) -> dict[str, Any]:
        from agentgym import __version__

        return {"protocol": PROTOCOL_VERSION, "agentgym": __version__, "env_id": self.env_id,
                "server_id": self.server_id, "max_sessions": self.sessions.max_sessions,
                "idle_timeout_s": self.sessions.idle_timeout_s, "reports_usage": self.reports_usage,
                "env": self.description}

    def health(self) -> dict[str, Any]:
        health = {"status": "ok", "env_id": self.env_id, "server_id": self.server_id, "protocol": PROTOCOL_VERSION,
                  "sessions": len(self.sessions.sessions), "max_sessions": self.sessions.max_sessions,
                  "sessions_dropped": self.sessions.dropped, "uptime_s": round(time.time() - self.started, 3)}
        if self.report_cgroup:
            health["cgroup"] = cgroup_usage()
        return health

    def check_open(self, body: Any) -> dict[str, Any] | None:
        """The error of a session request that must be refused (protocol, env id, slots), else None."""
        if not isinstance(body, dict):
            return error_body(ErrorCode.BAD_REQUEST, 'send a JSON object {"protocol": 1, "env_id": "..."}')
        version = body.get("protocol")
        if version != PROTOCOL_VERSION:
            return error_body(ErrorCode.PROTOCOL_MISMATCH,
                              f"this server speaks env protocol {PROTOCOL_VERSION}, the client {version!r}; use "
                              "the same agentgym version on both sides", server_protocol=PROTOCOL_VERSION)
        env_id = body.get("env_id")
        if env_id not in (None, self.env_id):
            return error_body(ErrorCode.UNKNOWN_ENV, f"this server serves {self.env_id}, not {env_id!r}",
                              env_id=self.env_id)
        if self.sessions.full:
            return error_body(ErrorCode.BUSY, f"all {self.sessions.max_sessions} sessions are in use; retry later, "
                              "start more replicas, or raise --max-sessions", max_sessions=self.sessions.max_sessions)
        return None

    async def run_call(self, session: Session, message: Any) -> tuple[int, dict[str, Any]]:
        """(HTTP status, reply body) of one call message ``{"method", "args", "kwargs", "timeout_s"}``."""
        if not isinstance(message, dict) or not isinstance(message.get("method"), str):
            return 400, error_body(ErrorCode.BAD_REQUEST, 'a call is {"method": "step", "args": [...], "kwargs": {}}')
        method, args, kwargs = message["method"], message.get("args") or [], message.get("kwargs") or {}
        timeout_s = message.get("timeout_s")
        if method not in METHODS:
            return 400, error_body(ErrorCode.UNKNOWN_METHOD, f"unknown method {method!r}; one of {', '.join(METHODS)}")
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            return 400, error_body(ErrorCode.BAD_REQUEST, "args must be a list and kwargs an object")
        if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, int | float)
                                      or timeout_s <= 0):
            return 400, error_body(ErrorCode.BAD_REQUEST, f"timeout_s must be a number of seconds > 0 or null (no "
                                   f"limit), got {timeout_s!r}")
        try:
            result = await self.sessions.call(session, method, args, kwargs, timeout_s)
        except Exception as exc:
            body = error_from_exception(exc)
            if not self.sessions.is_open(session):  # its call timed out or its worker died: the slot is free
                body["error"]["session_closed"] = True
            return HTTP_STATUS[ErrorCode(body["error"]["code"])], {**body, "usage": session.usage()}
        return 200, {"result": jsonable(result), "usage": session.usage()}


def create_app(server: EnvServer) -> Any:
    """The FastAPI app of `server`."""
    @contextlib.asynccontextmanager
    async def lifespan(app):
        reaper = asyncio.create_task(_reap_forever(server))
        try:
            yield
        finally:
            reaper.cancel()
            await server.sessions.close_all()

    app = fastapi.FastAPI(title=f"agentgym env server: {server.env_id}", lifespan=lifespan)

    def reply(status: int, body: dict[str, Any]) -> JSONResponse:
        return JSONResponse(body, status_code=status)

    def unknown(session_id: str) -> JSONResponse:
        return reply(404, error_body(ErrorCode.UNKNOWN_SESSION, f"no session {session_id} (closed, idle longer "
                                     f"than {server.sessions.idle_timeout_s} s, or opened before a server restart)",
                                     server_id=server.server_id))

    async def json_of(request: Request) -> Any:
        try:
            return json.loads(await request.body() or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return _BadJson(str(exc))

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return server.health()

    @app.get("/v1/info")
    async def info() -> dict[str, Any]:
        return server.info()

    @app.post("/v1/sessions")
    async def open_session(request: Request) -> JSONResponse:
        body = await json_of(request)
        refused = server.check_open(None if isinstance(body, _BadJson) else body)
        if refused is not None:
            return reply(HTTP_STATUS[ErrorCode(refused["error"]["code"])], refused)
        try:
            session = await server.sessions.open()
        except Exception as exc:
            error = error_from_exception(exc)
            return reply(HTTP_STATUS[ErrorCode(error["error"]["code"])], error)
        return reply(201, {"session_id": session.id, "server_id": server.server_id, "usage": session.usage()})

    @app.post("/v1/sessions/{session_id}/call")
    async def call(session_id: str, request: Request) -> JSONResponse:
        session = server.sessions.sessions.get(session_id)
        if session is None:
            return unknown(session_id)
        body = await json_of(request)
        if isinstance(body, _BadJson):
            return reply(400, error_body(ErrorCode.BAD_REQUEST, f"the body is not JSON: {body.reason}"))
        return reply(*await server.run_call(session, body))

    @app.delete("/v1/sessions/{session_id}")
    async def close(session_id: str) -> JSONResponse:
        if not await server.sessions.close(session_id):
            return unknown(session_id)
        return reply(200, {"closed": session_id})

    @app.websocket("/v1/sessions/{session_id}/ws")
    async def websocket(ws: WebSocket, session_id: str) -> None:
        await ws.accept()
        session = server.sessions.sessions.get(session_id)
        if session is None:
            body = json.loads(unknown(session_id).body)
            await ws.send_text(json.dumps({"id": None, **body}))
            await ws.close(code=4404)
            return
        with contextlib.suppress(WebSocketDisconnect):
            while True:
                text = await ws.receive_text()
                await ws.send_text(await _ws_reply(server, session, text))

    return app


async def _ws_reply(server: EnvServer, session: Session, text: str) -> str:
    try:
        message = json.loads(text)
    except json.JSONDecodeError as exc:
        return json.dumps({"id": None, **error_body(ErrorCode.BAD_REQUEST, f"the message is not JSON: {exc}")})
    if server.sessions.sessions.get(session.id) is not session:
        return json.dumps({"id": message.get("id") if isinstance(message, dict) else None,
                           **error_body(ErrorCode.UNKNOWN_SESSION, f"session {session.id} was closed")})
    _, body = await server.run_call(session, message)
    return json.dumps({"id": message.get("id") if isinstance(message, dict) else None, **body})


class _BadJson:
    def __init__(self, reason: str):
        self.reason = reason


async def _reap_forever(server: EnvServer) -> None:
    timeout = server.sessions.idle_timeout_s
    if timeout is None:
        return
    while True:
        await asyncio.sleep(min(max(timeout / 4, 0.05), 30.0))
        await server.sessions.reap_idle()


def server_factory(spec: Any, kwargs: dict[str, Any], env_runtime: str = "auto",
                   call_timeout_s: float | None = 300.0) -> Callable[[], Any]:
    """Sessions' env factory: a worker process per session unless the env is thread-safe (see placement)."""
    import functools

    from agentgym.registration import make
    from agentgym.runtime.placement import isolated_factory

    return isolated_factory(spec, kwargs, env_runtime, call_timeout_s) or functools.partial(make, spec.id, **kwargs)


def _uvicorn_config(server: EnvServer, log_level: str = "warning", **where: Any) -> Any:
    uvicorn = require("uvicorn", extra="serve", what="agentgym envs serve")
    return uvicorn.Config(create_app(server), log_level=log_level, ws="websockets-sansio",
                          ws_max_size=64 * 1024 * 1024, timeout_graceful_shutdown=5, **where)


def serve(env_id: str, factory: Callable[[], Any], *, host: str = "127.0.0.1", port: int = 8000,
          uds: str | None = None, max_sessions: int = 64, idle_timeout_s: float | None = 600.0,
          log_level: str = "warning", inline_fast_calls: bool = True, report_cgroup: bool = False) -> None:
    """Serve `factory`'s env as `env_id` until interrupted (on a TCP port, or on the unix socket `uds`)."""
    uvicorn = require("uvicorn", extra="serve", what="agentgym envs serve")
    server = EnvServer(env_id, factory, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s,
                       inline_fast_calls=inline_fast_calls, report_cgroup=report_cgroup)
    where: dict[str, Any] = {"uds": uds} if uds else {"host": host, "port": port}
    uvicorn.Server(_uvicorn_config(server, log_level, **where)).run()


class ServerThread:
    """An env server running in a thread of this process (an env worker's), on `host` and a free port.

        server = ServerThread("Maze-v0", factory, host="127.0.0.1")
        env = RemoteEnv(server.url)
    """

    def __init__(self, env_id: str, factory: Callable[[], Any], *, host: str = "127.0.0.1", max_sessions: int = 64,
                 idle_timeout_s: float | None = 600.0, start_timeout_s: float = 60.0):
        import threading

        uvicorn = require("uvicorn", extra="serve", what="an env server thread")
        self.env = EnvServer(env_id, factory, max_sessions=max_sessions, idle_timeout_s=idle_timeout_s)
        self._uvicorn = uvicorn.Server(_uvicorn_config(self.env, host=host, port=0))
        self._thread = threading.Thread(target=self._uvicorn.run, name=f"agentgym-env-server {env_id}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + start_timeout_s
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the env server thread for {env_id} did not start on {host} within "
                                   f"{start_timeout_s:g} s (see the log above)")
            time.sleep(0.02)
        port = self._uvicorn.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://{host}:{port}/{env_id}"

    def stop(self) -> None:
        self._uvicorn.should_exit = True
        self._thread.join(timeout=10)
