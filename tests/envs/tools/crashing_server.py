"""A minimal stdio MCP server, written without the SDK, whose `crash` tool kills its own process.

Used by the tests to check what the env does when a tool server dies in the
middle of an episode. `echo(text)` answers normally; `crash()` exits with
status 3 before answering; `hang()` never answers.
"""

from __future__ import annotations

import json
import os
import sys
import time

TOOLS = [
    {"name": "echo", "description": "Echo the text back.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}},
    {"name": "crash", "description": "Kill the server process.", "inputSchema": {"type": "object", "properties": {}}},
    {"name": "hang", "description": "Never answer.", "inputSchema": {"type": "object", "properties": {}}},
]


def reply(msg_id: object, result: dict) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg_id, "result": result}) + "\n")
    sys.stdout.flush()


def main() -> None:
    for line in sys.stdin:
        msg = json.loads(line)
        method, msg_id = msg.get("method"), msg.get("id")
        if msg_id is None:
            continue  # notifications
        if method == "initialize":
            reply(msg_id, {"protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
                           "serverInfo": {"name": "crashing", "version": "1.0"}})
        elif method == "tools/list":
            reply(msg_id, {"tools": TOOLS})
        elif method == "tools/call":
            name = msg["params"]["name"]
            if name == "crash":
                os._exit(3)
            if name == "hang":
                time.sleep(3600)
            text = msg["params"].get("arguments", {}).get("text", "")
            reply(msg_id, {"content": [{"type": "text", "text": text}], "isError": False})
        else:
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg_id,
                                         "error": {"code": -32601, "message": f"no method {method}"}}) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
