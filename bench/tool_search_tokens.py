"""Input tokens of a Claude Code request with many deferred MCP tools, translated toward a
Chat provider with `tool_search: emulate` and with `eager` (docs/tool-search.md).

The request is the recorded Claude Code tool-search session
(tests/fixtures/clients/claude-code-tool-search-loop.json) with 120 MCP-style tools added
as deferred (`mcp__<server>__<tool>`, copies of its own tools' definitions, as MCP servers
declare theirs), and Anthropic's regex search tool. Tokens are the proxy's own estimate
(proxai/endpoints/token_estimate.py, what count_tokens answers for providers without a counting
endpoint), and bytes of the provider request.

    python -m bench.tool_search_tokens
"""
from __future__ import annotations

import copy
import json
from pathlib import Path

import orjson

import engine
from proxai.endpoints.token_estimate import estimate

RECORDING = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "clients" / "claude-code-tool-search-loop.json"
SERVERS = ("github", "slack", "sentry", "grafana", "linear", "notion", "jira", "postgres", "figma", "stripe", "gdrive", "calendar")


def request(deferred: int = 120) -> dict:
    body = copy.deepcopy(json.loads(RECORDING.read_text())["body"])
    own = [t for t in body["tools"] if not t.get("defer_loading")]
    mcp = []
    for i in range(deferred):
        source = own[i % len(own)]
        server = SERVERS[i % len(SERVERS)]
        mcp.append({**copy.deepcopy(source), "name": f"mcp__{server}__{source['name'].lower()}_{i}", "defer_loading": True,
                    "description": f"[{server}] {source.get('description') or ''}"})
    body["tools"] = [*own, {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}, *mcp]
    body.pop("stream", None)
    return body


def measure(policy: str, body: dict, provider: str = "openai_chat_completions") -> tuple[int, int, int]:
    eng = engine.Engine.load()
    ctx = engine.Context("anthropic_messages", provider, client_body=body, tool_search=policy)
    out = eng.translate_request(ctx, copy.deepcopy(body))
    return len(out.get("tools") or ()), estimate(out), len(orjson.dumps(out))


def main() -> None:
    body = request()
    deferred = sum(1 for t in body["tools"] if t.get("defer_loading"))
    print(f"Claude Code request, {len(body['tools'])} tools of which {deferred} deferred, toward a Chat provider:")
    for policy in ("eager", "emulate"):
        tools, tokens, size = measure(policy, body)
        print(f"  {policy:8} {tools:4} tools sent  ~{tokens:7,} input tokens  {size:9,} bytes")


if __name__ == "__main__":
    main()
