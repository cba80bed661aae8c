"""What a Code-v0 reply can do: the tools, and turning a reply into a list of `CodeAction`s.

A reply is either tool calls in any format `agentgym.toolcalls` reads
(``<tool_call>`` JSON, OpenAI ``tool_calls``, bare JSON) or, for models
without tool calling, a fenced code block (```python ... ```): that writes
the task's main file and runs the visible tests. Anything else is a malformed
action, shown to the model as an error observation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from agentgym.errors import MalformedActionError
from agentgym.toolcalls import parse_tool_calls, validate_arguments

MAX_CALLS_PER_TURN = 8
_CODE_BLOCK = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
_PATH_COMMENT = re.compile(r"\A#\s*(?:file|path):\s*(\S+)\s*\n")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _tool(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": properties, "required": required, "additionalProperties": False}}}


TOOLS: dict[str, dict[str, Any]] = {
    "write_file": _tool("write_file", "Create or overwrite a file in the workspace (paths relative to /work).",
                        {"path": {"type": "string"}, "content": {"type": "string"}}, ["path", "content"]),
    "run": _tool("run", "Run a shell command in the workspace and show its output and exit code.",
                 {"command": {"type": "string"},
                  "timeout": {"type": "number", "description": "seconds, capped by the env"}}, ["command"]),
    "run_tests": _tool("run_tests", "Run the visible tests and show which pass.", {}, []),
    "submit": _tool("submit", "Submit the workspace as your final answer; hidden tests decide the reward.", {}, []),
}


@dataclass(frozen=True)
class CodeAction:
    """One thing to do: ``kind`` is a tool name; ``source`` says where it came from (a tool call or a code block)."""

    kind: str
    arguments: dict[str, Any] = field(default_factory=dict)
    source: str = "tool_call"


def _clean(value: Any) -> Any:
    """Lone surrogates (from JSON escapes) cannot be encoded; replace them like invalid UTF-8."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    return value


def parse_code_action(text: str, main_file: str) -> list[CodeAction]:
    """The actions of one reply, in order; `MalformedActionError` says why a reply is not one."""
    calls = parse_tool_calls(text)
    if calls:
        if len(calls) > MAX_CALLS_PER_TURN:
            raise MalformedActionError(f"found {len(calls)} tool calls; at most {MAX_CALLS_PER_TURN} per turn",
                                       hint="send fewer calls per reply")
        actions = []
        for call in calls:
            if call.name not in TOOLS:
                raise MalformedActionError(f"unknown tool '{call.name}'", kind="unknown_tool",
                                           hint=f"the tools are {', '.join(TOOLS)}")
            validate_arguments(call, TOOLS[call.name]["function"]["parameters"])
            actions.append(CodeAction(call.name, {k: _clean(v) for k, v in call.arguments.items()}))
        return actions
    block = _CODE_BLOCK.search(text)
    if block is None:
        raise MalformedActionError(
            "the reply holds neither a tool call nor a ```python code block",
            hint='call a tool, e.g. <tool_call>{"name": "run_tests", "arguments": {}}</tool_call>, '
                 f"or send the whole of {main_file} in a ```python block to write it and run the visible tests")
    code = _clean(block.group(1))
    path = _PATH_COMMENT.match(code)
    target = path.group(1) if path else main_file
    return [CodeAction("write_file", {"path": target, "content": code}, "code_block"),
            CodeAction("run_tests", {}, "code_block")]
