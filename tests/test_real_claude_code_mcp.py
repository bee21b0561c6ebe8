"""The real Claude Code (2.1.328), headless, with ENABLE_TOOL_SEARCH and an MCP server of many
tools (tests/mcp_stdio_server.py over stdio, `--mcp-config`), through the proxy toward a
Chat provider (the scripted mock).

Toward a custom base URL, Claude Code 2.1.328 (its "tst" tool search) lists the deferred
tools by name in a system reminder, declares a `DeferredToolPlaceholder` tool with
`defer_loading`, and declares an MCP tool (with `defer_loading`) only once its own
ToolSearch loaded it (a `tool_reference` in the tool result). With `tool_search: emulate`
the provider gets the tools that are not deferred and the ones a tool_reference loaded:
never the placeholder, never the MCP tools the search did not load. The tool loop must
finish (exit 0), the MCP tool must really have run and its result reach the provider.
Setup as tests/test_real_clients.py (which skips without Node or the CLIs).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from proxai.mock import Text, ToolCall, Turn
from test_real_clients import claude_code, claude_env, generation_requests, offered_tools, proxy_to, run, tool_results

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SERVER = Path(__file__).with_name("mcp_stdio_server.py")
MCP_TOOLS = 60
TARGET = "mcp__many__crm_lookup_0"  # Claude Code's name for the server's tool crm_lookup_0
PROMPT = "Look up CRM customer 7 and tell me its status."
FINAL = "Customer 7 is active."
CHAT = "openai_chat_completions"
VERSION = "2.1.328"


def script(record):
    """Search for the tool, call it, then report; side requests get a short text."""
    results = tool_results(record)
    if "call_mcp" in results:
        return Turn([Text(FINAL)])
    if "call_search" in results:
        return Turn([ToolCall("call_mcp", TARGET, '{"id": "7"}')])
    if PROMPT not in json.dumps(record.body) or "ToolSearch" not in offered_tools(record):
        return Turn([Text("OK")])
    return Turn([ToolCall("call_search", "ToolSearch", json.dumps({"query": f"select:{TARGET}", "max_results": 5}))])


def test_claude_code_with_many_mcp_tools_gets_only_what_its_search_loaded(start_proxy, harness, mock, tmp_path):
    claude = claude_code(VERSION)
    mock.responder = script
    proxy = proxy_to(start_proxy, harness, CHAT, "claude-*")
    work = tmp_path / "work"
    work.mkdir()
    calls = tmp_path / "mcp-calls.jsonl"
    config = tmp_path / "mcp.json"
    config.write_text(json.dumps({"mcpServers": {"many": {
        "type": "stdio", "command": sys.executable, "args": [str(SERVER), str(MCP_TOOLS)],
        "env": {"MCP_CALLS_FILE": str(calls)}}}}))
    env = claude_env(tmp_path / "home", proxy.url)
    env["ENABLE_TOOL_SEARCH"] = "true"
    result = run([claude, "-p", PROMPT, "--mcp-config", config, "--strict-mcp-config", "--allowedTools", TARGET], env, work)
    assert result.returncode == 0, f"stdout: {result.stdout}\nstderr: {result.stderr}"
    assert FINAL in result.stdout

    turns = [r for r in generation_requests(mock, CHAT) if PROMPT in json.dumps(r.body)]
    assert len(turns) == 3, [sorted(offered_tools(r)) for r in turns]
    before, loaded, after = (set(offered_tools(r)) for r in turns)
    mcp = lambda names: {n for n in names if n.startswith("mcp__")}  # noqa: E731
    # Every MCP tool is named to the model (Claude Code's reminder), none is declared before
    # the search, and Claude Code's deferred placeholder never reaches the provider ...
    listed = set(re.findall(r"mcp__many__[a-z]+_[a-z]+_[0-9]+", json.dumps(turns[0].body["messages"])))
    assert len(listed) == MCP_TOOLS
    assert mcp(before) == set() and "ToolSearch" in before
    assert all("DeferredToolPlaceholder" not in tools for tools in (before, loaded, after))
    # ... and then only the one the search loaded (Claude Code's own tools as before).
    assert mcp(loaded) == mcp(after) == {TARGET}
    assert loaded - before == {TARGET}
    # The tool really ran, and its result reached the provider.
    ran = [json.loads(line) for line in calls.read_text().splitlines()]
    assert [(c["name"], c["arguments"]) for c in ran] == [("crm_lookup_0", {"id": "7"})]
    assert "record found, status active" in tool_results(turns[2])["call_mcp"]
