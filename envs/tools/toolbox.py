"""One place that knows every tool of an episode: Python functions and MCP servers' tools.

`Toolbox.call` validates a parsed call against the tool's schema first, then
runs it. What can go wrong, and what the env makes of it:

- unknown tool, or arguments that break the schema: `MalformedActionError`
  (kind ``unknown_tool`` / ``invalid_arguments``) -> error observation;
- the tool raises, or an MCP tool answers with ``isError``: `ToolError`
  -> error observation, the episode goes on;
- an MCP server is gone (crashed, hung past its timeout): `ToolServerError`
  -> the env truncates the episode and puts the reason in ``info``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from agentgym.envs.tools.functions import FunctionTool, function_tool, load_function
from agentgym.envs.tools.mcp_client import McpServer, McpServerSpec

from agentgym.errors import AgentGymError, ConfigError, MalformedActionError
from agentgym.toolcalls import ToolCall, validate_arguments


class ToolError(AgentGymError):
    """A tool ran and failed; the message is shown to the model."""


class Toolbox:
    """Function tools plus lazily started MCP servers, addressed by tool name."""

    def __init__(self, functions: Sequence[Callable[..., Any] | str] = (),
                 servers: Sequence[McpServerSpec] = (), *, call_timeout_s: float = 10.0):
        self.functions: dict[str, FunctionTool] = {}
        for item in functions:
            tool = function_tool(load_function(item) if isinstance(item, str) else item)
            if tool.name in self.functions:
                raise ConfigError(f"two tool functions are named {tool.name!r}; tool names must be unique")
            self.functions[tool.name] = tool
        self.server_specs = list(servers)
        self.call_timeout_s = call_timeout_s
        self._servers: list[McpServer] = []
        self._routes: dict[str, McpServer] = {}
        self._schemas: dict[str, dict[str, Any]] = {n: t.schema for n, t in self.functions.items()}

    # ---- servers ---------------------------------------------------------
    def ensure_started(self) -> None:
        """Start (or restart after a crash) every MCP server and learn its tools."""
        if self._servers and all(s.alive for s in self._servers):
            return
        self.close()
        self._schemas = {n: t.schema for n, t in self.functions.items()}
        for spec in self.server_specs:
            server = McpServer(spec, call_timeout_s=self.call_timeout_s)
            self._servers.append(server)
            for schema in server.tools():
                name = schema["function"]["name"]
                if name in self._schemas:
                    raise ConfigError(f"tool {name!r} of MCP server {spec.name!r} clashes with another tool "
                                      "of the same name; rename one of them")
                self._schemas[name] = schema
                self._routes[name] = server

    def schemas(self) -> list[dict[str, Any]]:
        self.ensure_started()
        return list(self._schemas.values())

    def names(self) -> list[str]:
        self.ensure_started()
        return list(self._schemas)

    # ---- calls -----------------------------------------------------------
    def validate(self, call: ToolCall) -> None:
        """`MalformedActionError` unless `call` names a known tool with schema-valid arguments."""
        if call.name not in self._schemas:
            raise MalformedActionError(f"unknown tool '{call.name}'", kind="unknown_tool",
                                       hint=f"the tools are: {', '.join(self._schemas)}")
        validate_arguments(call, self._schemas[call.name]["function"].get("parameters") or {})

    def call(self, call: ToolCall) -> str:
        """The tool's result as text (validated first; see the module docstring for the failures)."""
        self.validate(call)
        if call.name in self.functions:
            try:
                value = self.functions[call.name](call.arguments)
            except Exception as exc:
                raise ToolError(f"{call.name} raised {type(exc).__name__}: {_message(exc)}") from None
            return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        try:
            result = self._routes[call.name].call(call.name, call.arguments)
        except ValueError as exc:
            raise ToolError(f"{call.name} was not called: {exc}") from None
        if result.is_error:
            raise ToolError(f"{call.name} failed: {result.text}")
        return result.text

    def close(self) -> None:
        for server in self._servers:
            server.close()
        self._servers.clear()
        self._routes.clear()


def _message(exc: Exception) -> str:
    return str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
