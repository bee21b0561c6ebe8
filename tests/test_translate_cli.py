"""`proxai translate`: offline dry-run with the server's own rules, for requests, responses and streams."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proxai.tools.cli import main
from proxai.mock import Text, ToolCall, Turn, encode_event, render
from test_passthrough_e2e import raw_post

ROOT = Path(__file__).resolve().parent.parent
CHAT, RESPONSES, ANTHROPIC = "openai_chat_completions", "openai_responses", "anthropic_messages"
PREFIX = {CHAT: "chat", RESPONSES: "responses", ANTHROPIC: "anthropic"}
PATH = {CHAT: "/v1/chat/completions", RESPONSES: "/v1/responses", ANTHROPIC: "/v1/messages"}
TOOL = {"name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}

REQUESTS = {
    CHAT: {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Weather in Paris?"}],
           "tools": [{"type": "function", "function": TOOL}], "temperature": 0.5, "max_tokens": 100},
    RESPONSES: {"instructions": "Be brief.", "input": "Weather in Paris?", "max_output_tokens": 100,
                "tools": [{"type": "function", **TOOL}], "temperature": 0.5},
    ANTHROPIC: {"system": "Be brief.", "messages": [{"role": "user", "content": "Weather in Paris?"}], "max_tokens": 100,
                "tools": [{"name": TOOL["name"], "description": TOOL["description"], "input_schema": TOOL["parameters"]}],
                "temperature": 0.5},
}
PAIRS = [(a, b) for a in REQUESTS for b in REQUESTS if a != b]


def translate(capsys, tmp_path, *args: str, data: bytes | dict) -> tuple[int, str, str]:
    path = tmp_path / "input"
    path.write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
    code = main(["translate", *args, str(path)])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("source,target", PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_request_matches_what_the_server_sends(capsys, tmp_path, proxy, mock, source, target):
    body = {"model": f"{PREFIX[target]}/m", **REQUESTS[source]}
    status, _, answer = raw_post(proxy.url, PATH[source], body)
    assert status == 200, answer
    sent = mock.requests[-1].body
    code, out, err = translate(capsys, tmp_path, "--from", source, "--to", target, data=body)
    assert code == 0, err
    printed = json.loads(out)
    assert printed.pop("model") == body["model"]  # offline there is no route to rewrite it
    assert sent.pop("model") == "m"
    assert printed == sent


@pytest.mark.parametrize("provider,client", [(ANTHROPIC, CHAT), (CHAT, RESPONSES), (RESPONSES, ANTHROPIC), (ANTHROPIC, RESPONSES)])
def test_response_body(capsys, tmp_path, provider, client):
    turn = Turn([Text("It is sunny."), ToolCall("call_1", "get_weather", '{"city": "Paris"}')])
    upstream = render(provider, turn, {"model": "m"})
    code, out, err = translate(capsys, tmp_path, "--response", "--from", provider, "--to", client, data=upstream)
    assert code == 0, err
    result = json.loads(out)
    text = json.dumps(result)
    assert "It is sunny." in text and "get_weather" in text
    if client == CHAT:
        assert result["object"] == "chat.completion" and result["choices"][0]["finish_reason"] == "tool_calls"
    elif client == RESPONSES:
        assert result["object"] == "response" and [o["type"] for o in result["output"]] == ["message", "function_call"]
    else:
        assert result["type"] == "message" and result["stop_reason"] == "tool_use"


def sse(provider: str, turn: Turn, request: dict) -> bytes:
    return b"".join(encode_event(name, data) for name, data in render(provider, turn, {"model": "m", "stream": True, **request}))


def events(out: str) -> list[tuple[str | None, str]]:
    found = []
    for block in out.split("\n\n"):
        name = None
        for line in block.splitlines():
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                found.append((name, line[6:]))
    return found


@pytest.mark.parametrize("provider,client", [(ANTHROPIC, CHAT), (CHAT, ANTHROPIC), (RESPONSES, CHAT), (CHAT, RESPONSES), (ANTHROPIC, RESPONSES)])
def test_recorded_stream(capsys, tmp_path, provider, client):
    recorded = sse(provider, Turn([Text("Hello there", chunks=["Hello ", "there"])]), {"stream_options": {"include_usage": True}})
    code, out, err = translate(capsys, tmp_path, "--stream", "--from", provider, "--to", client, data=recorded)
    assert code == 0, err
    evs = events(out)
    if client == CHAT:
        assert evs[-1][1] == "[DONE]"
        text = "".join(c["delta"].get("content") or "" for _, d in evs[:-1] for c in json.loads(d)["choices"])
    elif client == RESPONSES:
        assert evs[0][0] == "response.created" and evs[-1][0] == "response.completed"
        text = "".join(json.loads(d)["delta"] for n, d in evs if n == "response.output_text.delta")
    else:
        assert evs[0][0] == "message_start" and evs[-1][0] == "message_stop"
        text = "".join(json.loads(d)["delta"]["text"] for n, d in evs if n == "content_block_delta")
    assert text == "Hello there"


def test_truncated_stream_ends_with_the_clients_error(capsys, tmp_path):
    recorded = sse(ANTHROPIC, Turn([Text("Hello there")]), {})
    cut = recorded[: recorded.index(b"event: message_delta")]
    code, out, _ = translate(capsys, tmp_path, "--stream", "--from", ANTHROPIC, "--to", CHAT, data=cut)
    assert code == 0
    last = json.loads(events(out)[-1][1])
    assert "error" in last and "[DONE]" not in out


def test_a_stream_the_rules_refuse_names_the_rule(capsys, tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    # A partial stream override: one event's transitions; the rest of the file stays built in.
    (rules / "deltas.yaml").write_text("kind: stream.decode\nprotocol: anthropic_messages\non:\n"
                                       "  content_block_delta:\n    - steps:\n        - do: {$fail: no deltas today}\n")
    recorded = sse(ANTHROPIC, Turn([Text("Hello there")]), {})
    code, out, err = translate(capsys, tmp_path, "--stream", "--rules-dir", str(rules), "--from", ANTHROPIC, "--to", CHAT,
                               data=recorded)
    assert code == 1
    assert err.strip().endswith("error: no deltas today [rule " + str(Path(os.path.relpath(rules / "deltas.yaml"))) + ":6]")
    last = json.loads(events(out)[-1][1])   # the client's stream up to its error event is still shown
    assert last["error"]["message"] == "no deltas today"


def test_unrepresentable_request_and_bad_json(capsys, tmp_path):
    code, _, err = translate(capsys, tmp_path, "--from", CHAT, "--to", ANTHROPIC,
                             data={"model": "m", "messages": [{"role": "user", "content": "x"}], "n": 2})
    assert code == 1 and "n > 1" in err
    code, _, err = translate(capsys, tmp_path, "--from", CHAT, "--to", ANTHROPIC, data=b"{nope")
    assert code == 2 and "not valid JSON" in err


def test_missing_file(capsys):
    assert main(["translate", "--from", CHAT, "--to", ANTHROPIC, "/nonexistent/request.json"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_console_entry_point(tmp_path):
    path = tmp_path / "request.json"
    path.write_text(json.dumps({"model": "m", **REQUESTS[CHAT]}))
    proc = subprocess.run([sys.executable, "-m", "proxai.tools.cli", "translate", "--from", CHAT, "--to", ANTHROPIC, str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["system"] and out["max_tokens"] == 100 and out["tools"][0]["input_schema"]["properties"]["city"]


def test_thinking_mode_shows_either_form(capsys, tmp_path):
    data = {"model": "m", "messages": [{"role": "user", "content": "x"}], "reasoning_effort": "high", "max_tokens": 20000}
    code, out, _ = translate(capsys, tmp_path, "--from", CHAT, "--to", ANTHROPIC, data=data)
    assert code == 0 and json.loads(out)["thinking"] == {"type": "adaptive"}
    code, out, _ = translate(capsys, tmp_path, "--from", CHAT, "--to", ANTHROPIC, "--thinking-mode", "budget", data=data)
    assert code == 0 and json.loads(out)["thinking"] == {"type": "enabled", "budget_tokens": 8192}
