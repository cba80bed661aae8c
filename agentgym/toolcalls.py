"""Parse tool calls out of model text, and turn bad ones into clear error observations.

Chat templates make models write tool calls in a few shapes; all are accepted:

- Hermes / Qwen:   ``<tool_call>{"name": "f", "arguments": {...}}</tool_call>``
- OpenAI style:    ``{"tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{...}"}}]}``
- bare JSON:       ``{"name": "f", "arguments": {...}}`` (also inside a fenced code block)

Anything else raises `MalformedActionError`, which `error_observation` renders
as the text an env shows the model instead of crashing.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from agentgym.errors import MalformedActionError

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One parsed call: the tool's name, its arguments, and the text it came from."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw: str = ""
    format: str = "json"
    id: str | None = None


def _loads(text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedActionError(
            f"the {where} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})",
            hint='write the call as {"name": "<tool>", "arguments": {...}} with double-quoted keys',
        ) from None


def _call_from_obj(obj: Any, raw: str, fmt: str) -> ToolCall:
    if not isinstance(obj, dict):
        raise MalformedActionError(
            f"a tool call must be a JSON object, got {type(obj).__name__}",
            hint='write {"name": "<tool>", "arguments": {...}}',
        )
    call_id = obj.get("id")
    if "function" in obj and isinstance(obj["function"], dict):  # OpenAI tool_calls entry
        obj, fmt = obj["function"], "openai"
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        raise MalformedActionError(
            "the tool call has no \"name\" string", hint='add "name": "<tool>" to the call'
        )
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # OpenAI sends arguments as a JSON string
        args = _loads(args, f"arguments string of tool '{name}'") if args.strip() else {}
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise MalformedActionError(
            f"the arguments of tool '{name}' must be a JSON object, got {type(args).__name__}",
            kind="invalid_arguments",
            hint='write "arguments": {"param": value}',
        )
    return ToolCall(name=name.strip(), arguments=args, raw=raw, format=fmt, id=call_id)


def parse_tool_calls(text: str) -> list[ToolCall]:
    """Every tool call in `text`, in order; [] when the text contains none.

    Raises `MalformedActionError` when the text clearly tries to call a tool
    (a ``<tool_call>`` tag, a ``tool_calls`` key, a JSON object with ``name``)
    but the call cannot be parsed.
    """
    if "<tool_call>" in text:
        return [_call_from_obj(_loads(body, "<tool_call> body"), body, "hermes") for body in _HERMES.findall(text)]
    candidates = [m.group(1) for m in _FENCE.finditer(text)]
    stripped = text.strip()
    if not candidates and stripped.startswith("{"):
        candidates = [stripped]
    calls: list[ToolCall] = []
    for body in candidates:
        obj = _loads(body, "tool call")
        if isinstance(obj, dict) and isinstance(obj.get("tool_calls"), list):
            calls.extend(_call_from_obj(c, body, "openai") for c in obj["tool_calls"])
        elif isinstance(obj, dict) and ("name" in obj or "function" in obj):
            calls.append(_call_from_obj(obj, body, "json"))
    return calls


def parse_tool_call(text: str) -> ToolCall:
    """Exactly one tool call from `text`, or `MalformedActionError` saying why not."""
    calls = parse_tool_calls(text)
    if not calls:
        raise MalformedActionError(
            "no tool call found in the reply",
            hint='call a tool as <tool_call>{"name": "<tool>", "arguments": {...}}</tool_call>',
        )
    if len(calls) > 1:
        raise MalformedActionError(
            f"found {len(calls)} tool calls, but this environment takes one per turn",
            hint="send one call, wait for its result, then send the next",
        )
    return calls[0]


def validate_arguments(call: ToolCall, schema: dict[str, Any]) -> None:
    """Check `call.arguments` against a JSON-schema ``object`` (required keys, known keys, basic types)."""
    props: dict[str, Any] = schema.get("properties", {})
    missing = [k for k in schema.get("required", []) if k not in call.arguments]
    if missing:
        raise MalformedActionError(
            f"tool '{call.name}' is missing required argument(s): {', '.join(missing)}",
            kind="invalid_arguments",
            hint=f"its parameters are: {', '.join(props) or '(none)'}",
        )
    if schema.get("additionalProperties", True) is False or props:
        unknown = [k for k in call.arguments if k not in props]
        if unknown:
            raise MalformedActionError(
                f"tool '{call.name}' got unknown argument(s): {', '.join(unknown)}",
                kind="invalid_arguments",
                hint=f"its parameters are: {', '.join(props) or '(none)'}",
            )
    types = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list, "object": dict}
    for key, value in call.arguments.items():
        expected = props.get(key, {}).get("type")
        py = types.get(expected) if isinstance(expected, str) else None
        if py is None:
            continue
        bad = not isinstance(value, py) or (expected in ("integer", "number") and isinstance(value, bool))
        if bad:
            raise MalformedActionError(
                f"argument '{key}' of tool '{call.name}' must be {expected}, got {type(value).__name__} {value!r}",
                kind="invalid_arguments",
            )


def error_observation(error: BaseException | str, *, hint: str | None = None) -> str:
    """The text shown to the model in place of a normal observation when its action failed."""
    message = str(error)
    hint = hint or getattr(error, "hint", None)
    text = f"Error: {message}."
    if hint:
        text += f"\nHint: {hint}."
    return text
