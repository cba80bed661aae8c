"""Python functions as tools: an OpenAI-style JSON schema from type hints and the docstring.

    def weekday(date: str) -> str:
        '''The English weekday name of an ISO date.

        Args:
            date: a date as YYYY-MM-DD.
        '''

`function_tool(weekday)` gives a `FunctionTool` whose schema says ``date`` is a
required string described as "a date as YYYY-MM-DD". Parameters with defaults
are optional; ``int``, ``float``, ``str``, ``bool``, ``list[...]``, ``dict``,
``Literal[...]`` and ``X | None`` are understood.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentgym.importing import import_callable

_PRIMITIVES = {int: "integer", float: "number", str: "string", bool: "boolean", dict: "object", list: "array"}


def _json_type(hint: Any) -> dict[str, Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint in _PRIMITIVES:
        return {"type": _PRIMITIVES[hint]}
    if origin is typing.Literal:
        return {"type": _PRIMITIVES.get(type(args[0]), "string"), "enum": list(args)}
    if origin in (list, tuple, set, frozenset):
        return {"type": "array", "items": _json_type(args[0])} if args else {"type": "array"}
    if origin is dict:
        return {"type": "object"}
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        return _json_type(rest[0]) if len(rest) == 1 else {}
    return {}


def _arg_docs(doc: str) -> tuple[str, dict[str, str]]:
    """The description (first paragraph) and per-argument text of a Google-style docstring."""
    text = inspect.cleandoc(doc or "")
    description = text.split("\n\n")[0].replace("\n", " ").strip()
    args: dict[str, str] = {}
    section = re.search(r"^(?:Args|Arguments|Parameters):\s*\n((?:[ \t]+.*\n?)+)", text, re.MULTILINE)
    if section:
        current = ""
        for line in section.group(1).splitlines():
            m = re.match(r"\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)", line)
            if m and (len(line) - len(line.lstrip())) <= 8:
                current = m.group(1)
                args[current] = m.group(2).strip()
            elif current:
                args[current] += " " + line.strip()
    return description, args


@dataclass(frozen=True)
class FunctionTool:
    """A callable with its tool schema (OpenAI ``{"type": "function", "function": {...}}`` form)."""

    name: str
    func: Callable[..., Any]
    schema: dict[str, Any]

    @property
    def parameters(self) -> dict[str, Any]:
        return self.schema["function"]["parameters"]

    def __call__(self, arguments: dict[str, Any]) -> Any:
        return self.func(**arguments)


def function_tool(func: Callable[..., Any], name: str | None = None) -> FunctionTool:
    """Wrap `func` as a tool; its schema comes from its signature, type hints and docstring."""
    hints = typing.get_type_hints(func)
    description, arg_docs = _arg_docs(func.__doc__ or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(func).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        prop = _json_type(hints.get(param.name, Any))
        if param.name in arg_docs:
            prop["description"] = arg_docs[param.name]
        properties[param.name] = prop
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    tool_name = name or func.__name__
    parameters = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    schema = {"type": "function", "function": {"name": tool_name, "description": description or tool_name,
                                               "parameters": parameters}}
    return FunctionTool(tool_name, func, schema)


def load_function(target: str) -> Callable[..., Any]:
    """Import ``package.module:function`` (how functions are named in env kwargs and on the CLI)."""
    return import_callable(target, what="tool function")
