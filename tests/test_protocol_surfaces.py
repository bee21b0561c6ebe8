"""The surfaces that list or recognise protocols read them off the descriptors: the
inspector (its protocol list and the paths of captures on disk), the `proxai docs` pair
matrix, and `proxai translate`. A protocol folder added to the rules (the toy fixture,
Gemini Interactions) shows in each with no edit to the server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import engine
from proxai.observability.inspector import view
from proxai.tools import docsgen
from proxai.tools.cli import main

ROOT = Path(__file__).resolve().parent.parent
TOY = ROOT / "tests" / "fixtures" / "protocols"
INTERACTIONS, ANTHROPIC = "gemini_interactions", "anthropic_messages"


def test_every_protocol_of_the_rules_is_one_of_five_and_interactions_is_google():
    wire = engine.Engine.load().wire
    assert len(wire.names) == 5 and wire.names[-1] == INTERACTIONS
    assert wire.family(INTERACTIONS) == "google" and wire.title(INTERACTIONS) == "Gemini Interactions"


# --- the inspector --------------------------------------------------------------------------


@pytest.mark.parametrize("path,protocol", [
    ("/v1beta/interactions", INTERACTIONS),          # the client endpoint, and the provider's path
    ("/v1/interactions", INTERACTIONS),              # the SDK's default version with a custom base_url
    ("/upstream/v1beta/interactions", INTERACTIONS),  # below a provider's base URL
    ("/v1beta/models/gemini-3:generateContent", "gemini_generate_content"),
    ("/v1/models/gemini-3:streamGenerateContent", "gemini_generate_content"),
    ("/v1/chat/completions", "openai_chat_completions"),
    ("/chat/completions", "openai_chat_completions"),
    ("/v1/messages", ANTHROPIC),
    ("/v1/messages/count_tokens", ANTHROPIC),
    ("/v1/responses", "openai_responses"),
    ("/v1/models", None),
    ("/healthz", None),
])
def test_a_captured_path_names_its_protocol(path, protocol):
    assert view.protocol_of(path) == protocol


def test_a_protocol_folder_of_a_rules_dir_is_recognised_by_its_descriptor():
    # toy_chat's generate endpoint (client and upstream) is /v1/talk: no code knows it.
    assert view.protocol_of("/v1/talk") is None
    assert view.protocol_of("/v1/talk", engine.Engine.load(str(TOY))) == "toy_chat"


def test_every_protocols_own_paths_are_recognised():
    """Each protocol's client endpoint and upstream path, as its descriptor writes them."""
    wire = engine.Engine.load().wire
    for protocol in wire.names:
        for template in ((wire.endpoint(protocol, "generate") or {}).get("path"),
                         (wire.upstream(protocol, "generate") or {}).get("path")):
            assert view.protocol_of(template.replace("{model}", "m")) == protocol, (protocol, template)


def test_the_inspector_lists_every_protocol_with_its_title_and_family(harness, start_proxy):
    from test_inspector import get, inspector_config

    p = start_proxy(inspector_config(harness))
    doc = get(p, "/_proxai/api/requests").json()
    wire = p.proxy.engine.wire
    assert doc["protocols"] == list(wire.names) and INTERACTIONS in doc["protocols"]
    assert doc["protocol_info"][INTERACTIONS] == {"title": "Gemini Interactions", "family": "google"}
    assert doc["protocol_info"]["openai_responses"] == {"title": "OpenAI Responses", "family": "openai"}
    # The page's script reads its labels from there, and keeps no list of protocols of its own.
    script = (ROOT / "proxai/observability/inspector/static/inspector.js").read_text()
    assert not [p for p in wire.names if p in script.replace('"openai_chat_completions"', "").replace('"anthropic_messages"', "")]


# --- proxai docs --------------------------------------------------------------------------


def test_the_pair_matrix_has_every_translated_pair_of_the_rules():
    rules = docsgen.load_rules()
    names = docsgen.protocols(rules)
    assert names == list(engine.Engine.load().wire.names)
    pairs = docsgen.pairs(rules)
    assert len(pairs) == len(names) * (len(names) - 1) == 20
    assert {(INTERACTIONS, p) for p in names if p != INTERACTIONS} <= set(pairs)
    assert {(c, INTERACTIONS) for c in names if c != INTERACTIONS} <= set(pairs)
    index = docsgen.index_md(rules)
    for client, provider in pairs:
        assert f"]({docsgen.pair_file(client, provider)})" in index
        assert (ROOT / "docs" / "generated" / docsgen.pair_file(client, provider)).is_file()


def test_the_site_navigation_has_every_generated_pair_page():
    nav = (ROOT / "mkdocs.yml").read_text()
    for client, provider in docsgen.pairs(docsgen.load_rules()):
        assert f"generated/{docsgen.pair_file(client, provider)}" in nav, (client, provider)
    assert "interactions.md" in nav


# --- proxai translate ---------------------------------------------------------------------


def translate(capsys, tmp_path, *args: str, data: dict) -> tuple[int, str, str]:
    path = tmp_path / "input.json"
    path.write_text(json.dumps(data))
    code = main(["translate", *args, str(path)])
    out, err = capsys.readouterr()
    return code, out, err


def test_translate_an_interactions_request_toward_anthropic_and_the_answer_back(capsys, tmp_path):
    request = {
        "model": "claude-sonnet-4-5", "system_instruction": "Be brief.",
        "input": [{"type": "user_input", "content": [{"type": "text", "text": "Weather in Paris?"}]}],
        "tools": [{"type": "function", "name": "get_weather", "description": "Weather",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}],
        "generation_config": {"max_output_tokens": 100, "temperature": 0.5},
    }
    code, out, err = translate(capsys, tmp_path, "--from", INTERACTIONS, "--to", ANTHROPIC, data=request)
    assert code == 0, err
    sent = json.loads(out)
    assert sent["system"] == "Be brief." and sent["max_tokens"] == 100 and sent["temperature"] == 0.5
    assert sent["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]}]
    assert [t["name"] for t in sent["tools"]] == ["get_weather"]
    assert sent["tools"][0]["input_schema"] == request["tools"][0]["parameters"]

    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
               "content": [{"type": "text", "text": "Let me look."},
                           {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}],
               "stop_reason": "tool_use", "stop_sequence": None,
               "usage": {"input_tokens": 20, "output_tokens": 7}}
    code, out, err = translate(capsys, tmp_path, "--response", "--from", ANTHROPIC, "--to", INTERACTIONS, data=message)
    assert code == 0, err
    answer = json.loads(out)
    assert answer["status"] == "requires_action"  # a model that calls a function waits for its result
    steps = [s for s in answer["steps"] if s["type"] != "thought"]
    assert [s["type"] for s in steps] == ["model_output", "function_call"]
    assert steps[0]["content"] == [{"type": "text", "text": "Let me look."}]
    assert steps[1]["id"] == "toolu_1" and steps[1]["name"] == "get_weather" and steps[1]["arguments"] == {"city": "Paris"}
    assert answer["usage"]["total_input_tokens"] == 20 and answer["usage"]["total_output_tokens"] == 7


def test_translate_names_interactions_among_the_protocols_it_knows(capsys, tmp_path):
    code, _, err = translate(capsys, tmp_path, "--from", "gemini_interaction", "--to", ANTHROPIC, data={})
    assert code == 2 and "gemini_interactions" in err and "gemini_interaction'" in err


# --- captures, metrics, traces: an Interactions client and an Interactions provider --------


def test_captures_metrics_and_the_inspector_name_the_interactions_protocol(harness, start_proxy, mock, tmp_path, monkeypatch):
    from interactions_clients import MODEL, genai_client, interactions_config
    from proxai.mock import Text, Turn, Usage
    from proxai.observability import capture
    from test_inspector import requests_list
    from test_metrics import scrape, value

    monkeypatch.setenv("PROXAI_HOME", str(tmp_path))
    cfg = interactions_config(harness.mock_url)
    cfg["capture"] = dict.fromkeys(capture.PHASES, True)
    cfg["server"] = {"inspector": {"enabled": True}}
    p = start_proxy(cfg)
    # An Interactions client toward Anthropic, and a Chat client toward an Interactions provider.
    mock.enqueue(Turn([Text("Hello")], usage=Usage(input_tokens=9, output_tokens=2)))
    client = genai_client(p)  # held: the SDK closes its connection with the client
    interaction = client.interactions.create(model="anthropic/claude-up", input="hi")
    assert interaction.status == "completed"
    mock.enqueue(Turn([Text("Hi")], usage=Usage(input_tokens=5, output_tokens=1)))
    p.openai().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}],
                                       extra_headers={"x-request-id": "chat-to-interactions"})
    assert mock.requests[-1].path == "/v1beta/interactions"

    samples = scrape(p.url)
    common = dict(status="200", outcome="none", upstream_model="(from model)")  # a JSON answer has no stream outcome
    assert value(samples, "proxai_requests_total", client_protocol="openai_chat_completions",
                 provider_protocol=INTERACTIONS, provider="interactions", route="interactions", **common) == 1
    assert value(samples, "proxai_requests_total", client_protocol=INTERACTIONS,
                 provider_protocol=ANTHROPIC, provider="anthropic", route="anthropic", **common) == 1

    rows = {r["request_id"]: r for r in requests_list(p)}
    row = rows["chat-to-interactions"]
    assert (row["client_protocol"], row["provider_protocol"], row["mode"]) == ("openai_chat_completions", INTERACTIONS, "translated")
    assert {(r["client_protocol"], r["provider_protocol"]) for r in rows.values()} == {
        ("openai_chat_completions", INTERACTIONS), (INTERACTIONS, ANTHROPIC)}
    # What the capture files alone say (an inspector after a restart reads only them).
    for request_id, row in rows.items():
        client, provider = row["client_protocol"], row["provider_protocol"]
        phases = capture.load(request_id)
        assert set(phases) == set(capture.PHASES)
        disk = view.disk_summary(request_id, 0.0, phases, p.proxy.engine)
        assert (disk["client_protocol"], disk["provider_protocol"]) == (client, provider)
    from proxai.observability.tracing import _builtin_describe
    assert _builtin_describe(INTERACTIONS) == ("gcp.gemini", "generate_content")


def test_translate_a_recorded_anthropic_stream_into_interactions_events(capsys, tmp_path):
    from proxai.mock import Text, Turn, encode_event, render

    recorded = b"".join(encode_event(name, data) for name, data in
                        render(ANTHROPIC, Turn([Text("Hello there", chunks=["Hello ", "there"])]), {"model": "m", "stream": True}))
    path = tmp_path / "recorded.sse"
    path.write_bytes(recorded)
    code = main(["translate", "--stream", "--from", ANTHROPIC, "--to", INTERACTIONS, str(path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    events = []
    for block in out.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        data = json.loads(lines["data"])
        assert lines["event"] == data["event_type"] and data["event_id"]
        events.append(data)
    kinds = [e["event_type"] for e in events]
    assert kinds[0] == "interaction.created" and kinds[-1] == "interaction.completed"
    assert "".join(e["delta"]["text"] for e in events if e["event_type"] == "step.delta") == "Hello there"
    assert len({e["event_id"] for e in events}) == len(events)
