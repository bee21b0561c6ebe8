"""A small MCP server over stdio with many tools, for the real-client tests: what a
session with a few big MCP servers offers an agent. Newline-delimited JSON-RPC 2.0
(the MCP stdio transport): initialize, tools/list and tools/call; every call is answered
with a text naming the tool and its arguments, and appended to the file named by
$MCP_CALLS_FILE (one JSON line per call) so a test can see which tools really ran.

    python tests/mcp_stdio_server.py [TOOLS]   # TOOLS tools (default 60)
"""
from __future__ import annotations

import json
import os
import sys

AREAS = ["crm", "billing", "inventory", "calendar", "tickets", "wiki"]
ACTIONS = ["lookup", "list", "create", "update", "delete", "export", "import", "archive", "restore", "audit"]


def tools(count: int) -> list[dict]:
    out = []
    for i in range(count):
        area, action = AREAS[i % len(AREAS)], ACTIONS[(i // len(AREAS)) % len(ACTIONS)]
        out.append({
            "name": f"{area}_{action}_{i}",
            "description": f"{action.capitalize()} {area} records (tool {i} of the {area} service).",
            "inputSchema": {"type": "object", "properties": {"id": {"type": "string", "description": f"the {area} record id"}},
                            "required": ["id"]},
        })
    return out


def answer(message: dict, catalog: list[dict]) -> dict | None:
    method, ident = message.get("method"), message.get("id")
    if ident is None:
        return None  # a notification (notifications/initialized, ...)
    if method == "initialize":
        version = (message.get("params") or {}).get("protocolVersion") or "2025-06-18"
        result = {"protocolVersion": version, "capabilities": {"tools": {}},
                  "serverInfo": {"name": "many-tools", "version": "1.0.0"}}
    elif method == "tools/list":
        result = {"tools": catalog}
    elif method == "tools/call":
        params = message.get("params") or {}
        calls = os.environ.get("MCP_CALLS_FILE")
        if calls:
            with open(calls, "a") as f:
                f.write(json.dumps(params) + "\n")
        text = f"{params.get('name')} ran for {json.dumps(params.get('arguments'))}: record found, status active"
        result = {"content": [{"type": "text", "text": text}], "isError": False}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": ident, "error": {"code": -32601, "message": f"method not found: {method}"}}
    return {"jsonrpc": "2.0", "id": ident, "result": result}


def main() -> None:
    catalog = tools(int(sys.argv[1]) if len(sys.argv) > 1 else 60)
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(json.loads(line), catalog)
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
