"""Every recorded Chat and Responses request (tests/corpus, and the coding-agent CLIs'
bodies in tests/fixtures/clients) sent through the real server toward an Anthropic
provider, reasoning on, with the mock enforcing Anthropic's thinking rules: none gets a
400 for thinking. The histories' reasoning came from other providers (or was dropped by
the client), so the tool-use turns have no thinking block to restore: thinking goes off
for exactly those requests."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from harness import CLIENT_KEY

TESTS = Path(__file__).parent
PATHS = {"openai_chat_completions": "/v1/chat/completions", "openai_responses": "/v1/responses"}
MODEL = "anthropic/claude-sonnet-4-5"


def recorded() -> list[tuple[str, str, dict]]:
    """(name, client path, body) of every recorded Chat and Responses request."""
    out = []
    for protocol, path in PATHS.items():
        for f in sorted(TESTS.glob(f"corpus/*/{protocol}/request/*.json")):
            body = json.loads(f.read_text())
            if isinstance(body, dict):
                out.append((str(f.relative_to(TESTS)), path, body))
    for f in sorted((TESTS / "fixtures" / "clients").glob("*.json")):
        doc = json.loads(f.read_text())
        if doc.get("path") in PATHS.values():
            out.append((str(f.relative_to(TESTS)), doc["path"], doc["body"]))
    return out


def with_reasoning(path: str, body: dict) -> dict:
    """The request toward the Anthropic route, asking for reasoning as the client would, one JSON answer."""
    body = {k: v for k, v in body.items() if k not in ("stream", "stream_options")}
    body["model"] = MODEL
    if path == PATHS["openai_chat_completions"]:
        body.setdefault("reasoning_effort", "high")
    else:
        body["reasoning"] = {**(body.get("reasoning") or {}), "effort": "high"}
        body["store"] = False
    return body


def post(url: str, body: dict) -> tuple[int, str]:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Content-Type": "application/json", "Authorization": f"Bearer {CLIENT_KEY}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.parametrize("mode", ["adaptive", "budget"])
def test_no_recorded_request_gets_anthropics_thinking_400(harness, start_proxy, mock, mode):
    config = harness.default_config()
    config["providers"]["anthropic"]["thinking_mode"] = mode
    p = start_proxy(config)
    items = recorded()
    assert len(items) > 200
    refused, thinking_off_on_tool_turns, thinking_on = [], 0, 0
    for name, path, body in items:
        mock.requests.clear()
        status, text = post(p.url + path, with_reasoning(path, body))
        if not mock.requests:
            continue  # refused by the proxy itself (no Anthropic form), before any provider
        sent = mock.requests[-1].body
        if status == 400 and "thinking" in text:
            refused.append(f"{name}: {text[:200]}")
        elif sent.get("thinking"):
            thinking_on += 1
        elif any(isinstance(b, dict) and b.get("type") == "tool_result" for b in sent["messages"][-1]["content"]):
            thinking_off_on_tool_turns += 1
    assert refused == []
    # Both sides of the rule are exercised: tool-use turns without thinking, and thinking elsewhere.
    assert thinking_off_on_tool_turns > 20 and thinking_on > 100
