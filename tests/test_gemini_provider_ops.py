"""A Gemini provider beyond generation: demo mode, `proxai translate`, token counting,
key pools, metrics, captures and config."""
from __future__ import annotations

import json

import pytest

from gemini_helpers import GEMINI_KEY, MODEL, UPSTREAM_MODEL, check_request, gemini_config, sent
from proxai.tools.cli import main
from proxai.routing.config import load_dict
from proxai.http.errors import ConfigError
from proxai.mock import Text, ToolCall, Turn, Usage, render
from test_passthrough_e2e import raw_post

GEMINI = "gemini_generate_content"


def test_demo_mode_serves_a_gemini_provider(harness, mock):
    p = harness.start_demo()
    try:
        client = p.openai()
        r = client.chat.completions.create(model="gemini/demo", messages=[{"role": "user", "content": "hi there"}])
        assert r.choices[0].message.content.startswith("Hello from the ProxAI demo Gemini generateContent upstream!")
        assert 'You said: "hi there"' in r.choices[0].message.content
        with p.anthropic().messages.stream(model="gemini/demo-tools", max_tokens=100,
                                           tools=[{"name": "get_weather", "input_schema": {"type": "object"}}],
                                           messages=[{"role": "user", "content": "weather?"}]) as s:
            message = s.get_final_message()
        call = next(b for b in message.content if b.type == "tool_use")
        assert message.stop_reason == "tool_use" and call.name == "get_weather" and call.input == {"city": "Paris"}
        # Its result answers the next turn (the demo reads Gemini's functionResponse).
        r = client.responses.create(model="gemini/demo-tools", input=[
            {"role": "user", "content": "weather?"},
            {"type": "function_call", "call_id": call.id, "name": "get_weather", "arguments": '{"city": "Paris"}'},
            {"type": "function_call_output", "call_id": call.id, "output": "sunny"}])
        assert r.output_text == "The tool answered: sunny"
    finally:
        p.stop()


def test_translate_a_request_to_gemini(capsys, tmp_path):
    path = tmp_path / "request.json"
    path.write_text(json.dumps({"model": "m", "max_tokens": 50, "system": "Be brief.",
                                "messages": [{"role": "user", "content": "Weather in Paris?"}],
                                "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]}))
    assert main(["translate", "--from", "anthropic_messages", "--to", GEMINI, str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    check_request(out)
    assert out["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert out["generationConfig"] == {"maxOutputTokens": 50}
    assert out["tools"][0]["functionDeclarations"][0]["name"] == "get_weather"


@pytest.mark.parametrize("client", ["openai_chat_completions", "openai_responses", "anthropic_messages"])
def test_translate_a_recorded_gemini_stream(capsys, tmp_path, client):
    turn = Turn([Text("Bonjour", chunks=["Bon", "jour"]), ToolCall("", "get_weather", '{"city": "Paris"}')], id="r1")
    sse = b"".join(f"data: {json.dumps(chunk)}\r\n\r\n".encode()
                   for _, chunk in render(GEMINI, turn, {"model": "g", "stream": True}))
    path = tmp_path / "stream.sse"
    path.write_bytes(sse)
    assert main(["translate", "--stream", "--from", GEMINI, "--to", client, str(path)]) == 0
    out = capsys.readouterr().out
    assert "Bon" in out and "jour" in out and "gcall_r1_0" in out and "get_weather" in out
    terminal = {"openai_chat_completions": "data: [DONE]", "openai_responses": "event: response.completed",
                "anthropic_messages": "event: message_stop"}[client]
    assert terminal in out and "finishReason" not in out
    # Cut before the finishing chunk: the client's own stream error, never a normal end.
    path.write_bytes(sse.rsplit(b"data: ", 1)[0])
    assert main(["translate", "--stream", "--from", GEMINI, "--to", client, str(path)]) == 0
    out = capsys.readouterr().out
    assert "finishReason" in out and terminal not in out


def test_translate_a_gemini_response(capsys, tmp_path):
    body = render(GEMINI, Turn([Text("Bonjour")], usage=Usage(12, 3, cached_tokens=4)), {"model": "g"})
    path = tmp_path / "response.json"
    path.write_text(json.dumps(body))
    assert main(["translate", "--response", "--from", GEMINI, "--to", "anthropic_messages", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["content"] == [{"type": "text", "text": "Bonjour"}] and out["stop_reason"] == "end_turn"
    assert out["usage"]["input_tokens"] == 8 and out["usage"]["cache_read_input_tokens"] == 4


def test_count_tokens_asks_gemini(start_proxy, harness, mock):
    from proxai.mock import Json

    p = start_proxy(gemini_config(harness.mock_url))
    mock.enqueue(Json({"totalTokens": 31, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 31}]}))
    count = p.anthropic().messages.count_tokens(model=MODEL, system="Be brief.",
                                                messages=[{"role": "user", "content": "hello"}])
    assert count.input_tokens == 31
    record = mock.requests[-1]
    assert record.path == f"/v1beta/models/{UPSTREAM_MODEL}:countTokens"
    assert record.headers["x-goog-api-key"] == GEMINI_KEY
    request = record.body["generateContentRequest"]
    assert request["model"] == f"models/{UPSTREAM_MODEL}"
    assert request["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert request["contents"] == [{"role": "user", "parts": [{"text": "hello"}]}]


def test_key_pool_rotates_x_goog_api_key(start_proxy, harness, mock):
    config = gemini_config(harness.mock_url)
    del config["providers"]["gemini"]["api_key"]
    config["providers"]["gemini"]["api_keys"] = ["gm-key-one", "gm-key-two"]
    p = start_proxy(config)
    client = p.openai()
    for _ in range(4):
        mock.enqueue(Turn([Text("ok")]))
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    keys = [r.headers["x-goog-api-key"] for r in mock.requests]
    assert sorted(set(keys)) == ["gm-key-one", "gm-key-two"] and keys[0] != keys[1]


def test_fallback_from_gemini_to_another_provider(start_proxy, harness, mock):
    from proxai.mock import Error

    config = gemini_config(harness.mock_url)
    config["routing"]["routes"][-1]["fallbacks"] = [{"provider": "anthropic", "upstream_model": "claude-x"}]
    p = start_proxy(config)
    mock.enqueue(Error(503, message="The model is overloaded."), Turn([Text("from the fallback")]))
    r = p.openai().chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    assert r.choices[0].message.content == "from the fallback"
    assert [rec.path for rec in mock.requests] == [f"/v1beta/models/{UPSTREAM_MODEL}:generateContent", "/v1/messages"]


def test_metrics_and_log_usage_name_the_gemini_provider(start_proxy, harness, mock):
    p = start_proxy(gemini_config(harness.mock_url))
    mock.enqueue(Turn([Text("ok")], usage=Usage(20, 6, cached_tokens=5, reasoning_tokens=2)),
                 Turn([Text("ok")], usage=Usage(20, 6)))
    client = p.openai()
    client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    with client.chat.completions.stream(model=MODEL, messages=[{"role": "user", "content": "hi"}]) as s:
        s.get_final_completion()
    status, _, body = raw_post(p.url, "/metrics", b"", method="GET")
    text = body.decode()
    assert status == 200
    where = 'provider="gemini",provider_protocol="gemini_generate_content",route="gemini"'
    model = 'upstream_model="(from model)"'  # the route's $1: the client's model decides it
    for outcome in ("none", "complete"):  # not streamed; streamed
        assert ('proxai_requests_total{client="none",client_protocol="openai_chat_completions",'
                f'outcome="{outcome}",{where},status="200",{model}}} 1.0') in text
    assert (f'proxai_tokens_total{{client="none",client_protocol="openai_chat_completions",kind="input",{where},{model}}} '
            '40.0') in text
    assert (f'proxai_tokens_total{{client="none",client_protocol="openai_chat_completions",kind="cache_read",{where},'
            f'{model}}} 5.0') in text


def test_capture_shows_the_gemini_url_with_the_key_redacted(start_proxy, harness, mock, tmp_path, monkeypatch):
    from proxai.observability import capture
    monkeypatch.setenv("PROXAI_HOME", str(tmp_path / "home"))
    config = gemini_config(harness.mock_url)
    config["capture"] = dict.fromkeys(capture.PHASES, True)
    p = start_proxy(config)
    mock.enqueue(Turn([Text("ok")]))
    status, _, _ = raw_post(p.url, "/v1/chat/completions",
                            {"model": MODEL, "stream": True, "messages": [{"role": "user", "content": "hi"}]},
                            {"Authorization": "Bearer x", "x-request-id": "cap-gm"})
    assert status == 200
    raw = (tmp_path / "home" / "captures" / "cap-gm.provider_request.http").read_bytes()
    captured = capture.Captured("provider_request", raw)
    assert captured.start_line.endswith(f"/v1beta/models/{UPSTREAM_MODEL}:streamGenerateContent?alt=sse HTTP/1.1")
    assert captured.header("x-goog-api-key") == "[redacted]" and GEMINI_KEY.encode() not in raw
    assert captured.body == mock.requests[-1].raw
    sent(mock, True)


def test_config_accepts_gemini_providers_and_their_options(harness):
    config = gemini_config(harness.mock_url, thinking_mode="budget")
    config["routing"]["default_providers"]["gemini_generate_content"] = "gemini"
    loaded = load_dict(config, {})
    assert loaded.providers["gemini"].protocol == GEMINI and loaded.providers["gemini"].thinking_mode == "budget"
    bad = gemini_config(harness.mock_url, anthropic_version="2023-06-01x")
    with pytest.raises(ConfigError) as err:
        load_dict(bad, {})
    assert "providers.gemini.anthropic_version" in str(err.value)


def test_gemini_key_prompt_and_answer_never_reach_the_logs(start_proxy, harness, mock, tmp_path, monkeypatch):
    import logging

    from proxai.mock import Error
    from test_observability import LogCapture

    prompt, answer, args = "PROMPT-gemini-zanzibar-88", "ANSWER-gemini-quokka-11", '{"city": "ARGS-gemini-timbuktu"}'
    monkeypatch.setenv("PROXAI_HOME", str(tmp_path))
    p = start_proxy(gemini_config(harness.mock_url))
    paths = {"/v1/chat/completions": {"messages": [{"role": "user", "content": prompt}]},
             "/v1/responses": {"input": prompt},
             "/v1/messages": {"max_tokens": 50, "messages": [{"role": "user", "content": prompt}]}}
    with LogCapture("json", level=logging.DEBUG) as cap:
        for path, body in paths.items():
            for stream in (False, True):
                mock.enqueue(Turn([Text(answer), ToolCall("", "get_weather", args)]))
                assert raw_post(p.url, path, {"model": MODEL, "stream": stream, **body})[0] == 200
                mock.enqueue(Error(400, message=f"bad prompt: {prompt}"))
                assert raw_post(p.url, path, {"model": MODEL, "stream": stream, **body})[0] == 400
        cap.lines_with("proxai.request", count=12)
    for secret in (GEMINI_KEY, prompt, answer, "ARGS-gemini-timbuktu"):
        assert secret not in cap.text
    assert cap.text.count('"provider_protocol":"gemini_generate_content"') == 12  # the run was logged


def test_crlf_separated_stream(start_proxy, harness, mock):
    p = start_proxy(gemini_config(harness.mock_url))
    mock.enqueue(Turn([Text("line one", chunks=["line", " one"])], crlf=True, split_bytes=5))
    with p.anthropic().messages.stream(model=MODEL, max_tokens=20, messages=[{"role": "user", "content": "x"}]) as s:
        message = s.get_final_message()
    assert message.content[0].text == "line one" and message.stop_reason == "end_turn"
    sent(mock, True)
