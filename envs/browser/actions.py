"""Browser actions as text or tool calls, parsed into one typed record with clear errors.

Text form (the last line that looks like a call is the action, so a model may
think aloud first)::

    click(12)   fill(7, "blue shirt")   select(9, "Large")   press(7, "Enter")
    scroll(0, 400)   goto("http://shop.test/cart")   back()   answer("42")

Arguments are Python literals (read with `ast.literal_eval`, never executed);
a bid may be given as ``12`` or ``"12"``. The same actions are offered as
tool calls (`TOOLS`), in any shape `agentgym.toolcalls` reads.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any

from agentgym.errors import MalformedActionError
from agentgym.toolcalls import parse_tool_call

#: name -> (argument names, argument kinds) ; kinds: bid, str, int
SIGNATURES: dict[str, tuple[tuple[str, str], ...]] = {
    "click": (("bid", "bid"),),
    "fill": (("bid", "bid"), ("text", "str")),
    "select": (("bid", "bid"), ("option", "str")),
    "press": (("bid", "bid"), ("key", "str")),
    "scroll": (("dx", "int"), ("dy", "int")),
    "goto": (("url", "str"),),
    "back": (),
    "answer": (("text", "str"),),
}
DESCRIPTIONS = {
    "click": "Click the element with this bid.",
    "fill": "Clear the text field with this bid and type text into it.",
    "select": "Choose the option with this visible text in the drop-down with this bid.",
    "press": "Press a key (Enter, Tab, ArrowDown, ...) with the element with this bid focused.",
    "scroll": "Scroll the page by dx, dy pixels.",
    "goto": "Open a URL of the task site.",
    "back": "Go back to the previous page.",
    "answer": "Give the final answer (information tasks) or declare the task done; ends the episode.",
}
USAGE = ('click(bid) | fill(bid, "text") | select(bid, "option") | press(bid, "Enter") | scroll(dx, dy) | '
         'goto("url") | back() | answer("text")')
_CALL = re.compile(r"^\s*`*\s*([a-z_]+)\s*\((.*)\)\s*`*\s*;?\s*$", re.DOTALL)
_KEY = re.compile(r"^(?:(?:Control|Shift|Alt|Meta)\+)*[A-Za-z0-9]+$|^[ -~]$")


@dataclass(frozen=True)
class BrowserAction:
    """One parsed action."""

    name: str
    bid: str | None = None
    text: str | None = None
    dx: int = 0
    dy: int = 0

    def __str__(self) -> str:
        """The canonical text form, which `parse_action` reads back to the same record."""
        if self.name == "scroll":
            return f"scroll({self.dx}, {self.dy})"
        args = [a for a in (self.bid, _dq(self.text) if self.text is not None else None) if a is not None]
        return f"{self.name}({', '.join(args)})"


def _dq(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def tool_schemas() -> list[dict[str, Any]]:
    """OpenAI-style schemas of the actions, for chat templates that render tools."""
    kinds = {"bid": {"type": "string", "description": "the element's bid, as shown in [brackets]"},
             "str": {"type": "string"}, "int": {"type": "integer"}}
    return [{"type": "function", "function": {
        "name": name, "description": DESCRIPTIONS[name],
        "parameters": {"type": "object", "properties": {arg: dict(kinds[kind]) for arg, kind in sig},
                       "required": [arg for arg, _ in sig], "additionalProperties": False}}}
        for name, sig in SIGNATURES.items()]


def _call_line(text: str) -> tuple[str, str]:
    fenced = re.findall(r"```(?:\w+)?\s*(.*?)```", text, re.DOTALL)
    candidates = [c.strip() for c in fenced] + [line.strip() for line in reversed(text.strip().splitlines())]
    for candidate in candidates:
        match = _CALL.match(candidate)
        if match:
            return match.group(1), match.group(2)
    raise MalformedActionError(
        f"no action found in the reply (got {text.strip()[:80]!r})", hint=f"end the reply with one action: {USAGE}")


def _literals(name: str, raw: str) -> tuple[Any, ...]:
    if not raw.strip():
        return ()
    try:
        value = ast.literal_eval(f"({raw},)")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        raise MalformedActionError(
            f"the arguments of {name}(...) are not plain literals: {raw[:80]!r}",
            hint='quote text with double quotes, e.g. fill(12, "blue shirt")') from None
    return tuple(value)


def _convert(name: str, arg: str, kind: str, value: Any) -> Any:
    if kind == "bid" and isinstance(value, (int, str)) and not isinstance(value, bool):
        bid = str(value).strip().strip("[]")
        if bid.isdigit():
            return bid
    elif kind == "str" and isinstance(value, str):
        return value
    elif kind == "int" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    want = {"bid": "an element id such as 12", "str": "a quoted string", "int": "a whole number"}[kind]
    raise MalformedActionError(f"argument {arg!r} of {name}(...) must be {want}, got {value!r}"[:200],
                               kind="invalid_arguments", hint=USAGE)


def build(name: str, values: dict[str, Any]) -> BrowserAction:
    """A `BrowserAction` from a name and named argument values, checked against `SIGNATURES`."""
    if name not in SIGNATURES:
        raise MalformedActionError(f"unknown action {name!r}", kind="unknown_tool", hint=f"use one of: {USAGE}")
    sig = SIGNATURES[name]
    missing = [arg for arg, _ in sig if arg not in values]
    extra = sorted(set(values) - {arg for arg, _ in sig})
    if missing or extra:
        raise MalformedActionError(
            f"{name}(...) takes ({', '.join(a for a, _ in sig)}); missing {missing}, unexpected {extra}",
            kind="invalid_arguments", hint=USAGE)
    args = {arg: _convert(name, arg, kind, values[arg]) for arg, kind in sig}
    if name == "press" and not _KEY.match(args["key"]):
        raise MalformedActionError(f"unknown key {args['key'][:40]!r}", kind="invalid_arguments",
                                   hint="name a key such as Enter, Tab, ArrowDown, Control+a")
    text = args.get("text", args.get("option", args.get("key", args.get("url"))))
    return BrowserAction(name, bid=args.get("bid"), text=text, dx=args.get("dx", 0), dy=args.get("dy", 0))


def parse_action(text: str, *, max_chars: int = 100_000) -> BrowserAction:
    """The action in a model reply (text call or tool call); `MalformedActionError` says what is wrong."""
    if len(text) > max_chars:
        raise MalformedActionError(f"the reply is {len(text)} characters, over the {max_chars} limit",
                                   hint="reply with one short action")
    stripped = text.strip()
    if "<tool_call>" in stripped or stripped.startswith("{") or '"tool_calls"' in stripped:
        call = parse_tool_call(stripped)
        return build(call.name, dict(call.arguments))
    name, raw = _call_line(stripped)
    if name not in SIGNATURES:
        raise MalformedActionError(f"unknown action {name!r}", kind="unknown_tool", hint=f"use one of: {USAGE}")
    values = _literals(name, raw)
    sig = SIGNATURES[name]
    if len(values) != len(sig):
        raise MalformedActionError(f"{name}(...) takes {len(sig)} argument(s) ({', '.join(a for a, _ in sig)}), "
                                   f"got {len(values)}", kind="invalid_arguments", hint=USAGE)
    return build(name, {arg: value for (arg, _), value in zip(sig, values, strict=True)})
