"""MCP servers over stdio, driven from synchronous code.

The official `mcp` SDK is async; an env's `step` is sync. `McpServer` runs the
SDK's stdio client in its own event loop on a daemon thread: one long-lived
task holds the client session (its context managers must be entered and left
in one task), and sync callers hand it requests through a queue and wait on a
`concurrent.futures.Future` with a timeout. A server that exits or stops
answering marks the connection dead; every later call fails fast with
`ToolServerError`, an `EnvInfraError`: the collector ends that episode as
truncated by infrastructure (``failure="infra"``) with the reason.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import os
import shutil
import sys
import threading
from dataclasses import dataclass, field
from typing import Any

from agentgym.errors import ConfigError, EnvInfraError, require

#: The SDK's JSON-RPC error code for a closed connection (`mcp.types.CONNECTION_CLOSED`, v1 and v2).
_CONNECTION_CLOSED = -32000


class ToolServerError(EnvInfraError):
    """The MCP server could not be started, crashed, or stopped answering (infrastructure, not the model)."""

    def __init__(self, reason: str, *, kind: str = "tool_server_crashed"):
        super().__init__(reason, kind=kind)


@dataclass(frozen=True)
class McpServerSpec:
    """How to launch one stdio MCP server (``command`` is looked up on PATH and next to the Python binary)."""

    command: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    name: str = ""

    @classmethod
    def parse(cls, value: Any) -> McpServerSpec:
        """From a dict ``{"command", "args", "env", "name"}`` (env kwargs, JSON) or a spec."""
        if isinstance(value, McpServerSpec):
            return value
        if not isinstance(value, dict) or not isinstance(value.get("command"), str):
            raise ConfigError(f"an MCP server must be given as {{'command': str, 'args': [...]}}, got {value!r}")
        unknown = sorted(set(value) - {"command", "args", "env", "name"})
        if unknown:
            raise ConfigError(f"unknown MCP server key(s) {unknown}; allowed: command, args, env, name")
        return cls(value["command"], tuple(str(a) for a in value.get("args", ())), dict(value.get("env", {})),
                   str(value.get("name", "")) or value["command"])


def _resolve(command: str) -> str:
    found = shutil.which(command) or shutil.which(command, path=os.path.dirname(sys.executable))
    if not found:
        raise ConfigError(f"MCP server command {command!r} was not found on PATH or next to {sys.executable}; "
                          "install it (e.g. pip install mcp-server-time) or give its full path")
    return found


def _attr(obj: Any, *names: str, default: Any = None) -> Any:
    """Field of an SDK object under its v2 (snake_case) or v1 (camelCase) name."""
    for name in names:
        if hasattr(obj, name):
            return getattr(obj, name)
    return default


@dataclass(frozen=True)
class McpToolResult:
    text: str
    is_error: bool


class McpServer:
    """One running stdio MCP server with a synchronous `tools()` / `call()` API."""

    def __init__(self, spec: McpServerSpec, *, call_timeout_s: float = 10.0, start_timeout_s: float = 30.0):
        require("mcp", extra="tools", what="MCP tool servers")
        self.spec, self.call_timeout_s = spec, call_timeout_s
        self._command = _resolve(spec.command)
        self._loop = asyncio.new_event_loop()
        self._queue: asyncio.Queue[Any] | None = None
        self._ready: concurrent.futures.Future[list[dict[str, Any]]] = concurrent.futures.Future()
        self._dead = ""
        self._thread = threading.Thread(target=self._run_loop, name=f"mcp-{spec.name}", daemon=True)
        self._thread.start()
        try:
            self._tools = self._ready.result(timeout=start_timeout_s)
        except concurrent.futures.TimeoutError:
            self.close()
            raise ToolServerError(f"MCP server {spec.name!r} did not start within {start_timeout_s:g} s") from None
        except ToolServerError:
            self.close()
            raise

    # ---- background loop -------------------------------------------------
    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._serve())
        except BaseException as exc:  # the server died: record why, fail what is pending
            if not self._ready.done():
                self._dead = f"MCP server {self.spec.name!r} failed to start: {_describe(exc)}"
                self._ready.set_exception(ToolServerError(self._dead))
            self._dead = self._dead or f"MCP server {self.spec.name!r} stopped: {_describe(exc)}"
        finally:
            self._dead = self._dead or f"MCP server {self.spec.name!r} has exited"
            if not self._ready.done():
                self._ready.set_exception(ToolServerError(self._dead))
            self._fail_pending()
            self._loop.close()

    async def _serve(self) -> None:
        from mcp import ClientSession, StdioServerParameters, stdio_client

        params = StdioServerParameters(command=self._command, args=list(self.spec.args),
                                       env={**os.environ, **self.spec.env} if self.spec.env else None)
        self._queue = asyncio.Queue()
        with open(os.devnull, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                listed = await session.list_tools()
                self._ready.set_result([_tool_schema(t) for t in listed.tools])
                while True:
                    item = await self._queue.get()
                    if item is None:
                        return
                    name, arguments, future = item
                    await self._call(session, name, arguments, future)

    async def _call(self, session: Any, name: str, arguments: dict[str, Any],
                    future: concurrent.futures.Future[McpToolResult]) -> None:
        try:
            result = await asyncio.wait_for(session.call_tool(name, arguments), self.call_timeout_s)
        except TimeoutError:
            self._dead = f"MCP server {self.spec.name!r} did not answer {name} within {self.call_timeout_s:g} s"
            future.set_exception(ToolServerError(self._dead))
            raise
        except Exception as exc:
            if type(exc).__name__ in ("McpError", "MCPError") and not _connection_closed(exc):
                # a JSON-RPC error answer: the server is alive and said no
                future.set_result(McpToolResult(str(exc) or type(exc).__name__, True))
                return
            why = "closed the connection (its process exited)" if _connection_closed(exc) else \
                f"failed ({_describe(exc)})"
            self._dead = f"MCP server {self.spec.name!r} {why} during a call to {name}"
            future.set_exception(ToolServerError(self._dead))
            raise
        texts = [str(_attr(block, "text", default=block)) for block in _attr(result, "content", default=[])]
        future.set_result(McpToolResult("\n".join(texts), bool(_attr(result, "is_error", "isError", default=False))))

    def _fail_pending(self) -> None:
        queue = self._queue
        while queue is not None and not queue.empty():
            item = queue.get_nowait()
            if item is not None and not item[2].done():
                item[2].set_exception(ToolServerError(self._dead))

    # ---- sync API --------------------------------------------------------
    @property
    def alive(self) -> bool:
        return not self._dead and self._thread.is_alive()

    @property
    def failure(self) -> str:
        return self._dead

    def tools(self) -> list[dict[str, Any]]:
        """OpenAI-style schemas of the server's tools."""
        return list(self._tools)

    def call(self, name: str, arguments: dict[str, Any]) -> McpToolResult:
        """Call a tool; `ToolServerError` when the server is gone or does not answer in time."""
        if not self.alive:
            raise ToolServerError(self._dead or f"MCP server {self.spec.name!r} is not running")
        try:
            json.dumps(arguments, ensure_ascii=False).encode("utf-8")
        except (TypeError, ValueError) as exc:  # would break the stdio transport, not just this call
            raise ValueError(f"the arguments cannot be sent as UTF-8 JSON: {exc}") from None
        future: concurrent.futures.Future[McpToolResult] = concurrent.futures.Future()
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (name, arguments, future))  # type: ignore[union-attr]
        try:
            return future.result(timeout=self.call_timeout_s + 5)
        except concurrent.futures.TimeoutError:
            self._dead = f"MCP server {self.spec.name!r} did not answer {name} within {self.call_timeout_s:g} s"
            raise ToolServerError(self._dead) from None

    def close(self) -> None:
        """Stop the session and the server process (idempotent)."""
        if self._thread.is_alive() and self._queue is not None and not self._loop.is_closed():
            try:
                self._loop.call_soon_threadsafe(self._queue.put_nowait, None)
            except RuntimeError:
                pass
        self._thread.join(timeout=10)


def _tool_schema(tool: Any) -> dict[str, Any]:
    parameters = _attr(tool, "input_schema", "inputSchema", default=None) or {"type": "object", "properties": {}}
    return {"type": "function", "function": {"name": tool.name, "description": tool.description or tool.name,
                                             "parameters": parameters}}


def _connection_closed(exc: BaseException) -> bool:
    """Whether an SDK error means the transport is gone (JSON-RPC code -32000, CONNECTION_CLOSED)."""
    code = getattr(getattr(exc, "error", None), "code", None)
    return code == _CONNECTION_CLOSED or "connection closed" in str(exc).lower()


def _describe(exc: BaseException) -> str:
    """The innermost message of an exception (group) from the SDK's task groups."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
