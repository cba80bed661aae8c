"""How SQL-v0 reads the model's reply: a tool call, a ```sql block, or plain SQL.

Rules, in order (the system prompt states them to the model):

1. A tool call (Hermes ``<tool_call>``, OpenAI ``tool_calls`` or bare JSON):
   ``execute_sql(query)`` runs an exploratory query, ``submit(query)`` gives
   the final answer. One call per reply.
2. Otherwise a line starting with ``SUBMIT:`` marks the final answer: the SQL
   after it (a ```sql block or plain text) is submitted.
3. Otherwise the last ```sql fenced block, or the whole reply when it starts
   with a SQL keyword, is run: as exploration by default, as the final answer
   when the env is made with ``bare_sql="submit"`` (single-turn text-to-SQL).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentgym.errors import MalformedActionError
from agentgym.toolcalls import parse_tool_calls, validate_arguments

_QUERY_PARAM = {"query": {"type": "string", "description": "One SQL statement."}}
EXECUTE_TOOL = {"type": "function", "function": {
    "name": "execute_sql", "description": "Run one read-only SQL statement and see its result (exploration).",
    "parameters": {"type": "object", "properties": _QUERY_PARAM, "required": ["query"]}}}
SUBMIT_TOOL = {"type": "function", "function": {
    "name": "submit", "description": "Submit the final SQL query that answers the question; ends the episode.",
    "parameters": {"type": "object", "properties": _QUERY_PARAM, "required": ["query"]}}}
TOOLS = {"execute_sql": EXECUTE_TOOL, "submit": SUBMIT_TOOL}

_FENCE = re.compile(r"```[ \t]*(?:sql|sqlite|postgresql|postgres)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)
_SUBMIT = re.compile(r"^[ \t]*submit[ \t]*:", re.IGNORECASE | re.MULTILINE)
#: Replies starting with one of these are taken as SQL (writes too, so the model hears why they are refused).
_SQL_START = re.compile(r"^\s*\(*\s*(select|with|values|explain|pragma|show|table|insert|update|delete|replace|"
                        r"merge|drop|create|alter|truncate|attach|detach|vacuum|reindex|analyze|begin|commit|"
                        r"rollback|savepoint|release|set|reset|copy|grant|revoke|call|do)\b", re.IGNORECASE)


@dataclass(frozen=True)
class SqlAction:
    """A parsed reply: run `query` as exploration or submit it; `source` says which rule matched."""

    kind: str  # "explore" | "submit"
    query: str
    source: str  # "tool:<format>" | "marker" | "fence" | "plain"


def _sql_in(text: str) -> tuple[str, str] | None:
    fences = _FENCE.findall(text)
    if fences:
        return fences[-1].strip(), "fence"
    if _SQL_START.match(text):
        return text.strip(), "plain"
    return None


def parse_sql_action(text: str, *, bare_sql: str = "explore") -> SqlAction:
    """The action in `text` by the module's rules, or `MalformedActionError` saying how to write one."""
    calls = parse_tool_calls(text)
    if len(calls) > 1:
        raise MalformedActionError(f"found {len(calls)} tool calls; send one per reply",
                                   hint="call execute_sql or submit once, then wait for the result")
    if calls:
        call = calls[0]
        if call.name not in TOOLS:
            raise MalformedActionError(f"unknown tool '{call.name}'", kind="unknown_tool",
                                       hint="the tools are execute_sql(query) and submit(query)")
        validate_arguments(call, TOOLS[call.name]["function"]["parameters"])
        kind = "submit" if call.name == "submit" else "explore"
        return SqlAction(kind, call.arguments["query"], f"tool:{call.format}")
    marker = _SUBMIT.search(text)
    if marker:
        found = _sql_in(text[marker.end():])
        if found is None:
            raise MalformedActionError("'SUBMIT:' is not followed by a SQL query",
                                       hint="write SUBMIT: followed by one SELECT statement or a ```sql block")
        return SqlAction("submit", found[0], "marker")
    found = _sql_in(text)
    if found is None:
        shown = " ".join(text.split())[:60] or "(empty)"
        raise MalformedActionError(f"no SQL query or tool call found in '{shown}'",
                                   hint='call execute_sql or submit, e.g. <tool_call>{"name": "execute_sql", '
                                        '"arguments": {"query": "SELECT ..."}}</tool_call>')
    return SqlAction("submit" if bare_sql == "submit" else "explore", found[0], found[1])
