"""Usage is read by one set of rules: a rules_dir that overrides a protocol's usage
template changes what the client sees and what the log line, the metrics and the
inspector report, alike (the real server, an official SDK, the mock upstream)."""
from __future__ import annotations

import re

import pytest

from proxai.mock import Text, Turn, Usage

# Chat's prompt_tokens read as 10 input tokens, whatever the provider says.
OVERRIDE = """\
kind: protocol
protocol: openai_chat_completions
templates:
  usage_in:
    params: [u]
    body:
      input_tokens: 10
      output_tokens: $u.completion_tokens
"""


def _config(harness) -> dict:
    cfg = harness.default_config()
    cfg["server"] = {"inspector": {"enabled": True}}
    return cfg


def _tokens(metrics: str, kind: str) -> float:
    total = 0.0
    for line in metrics.splitlines():
        if line.startswith("proxai_tokens_total{") and f'kind="{kind}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _ask(srv, stream: bool) -> tuple[int, int]:
    import anthropic

    client = anthropic.Anthropic(base_url=srv.url, api_key="k", max_retries=0)
    try:
        kw = dict(model="chat/gpt-x", max_tokens=20, messages=[{"role": "user", "content": "hi"}])
        if stream:
            with client.messages.stream(**kw) as s:
                message = s.get_final_message()
        else:
            message = client.messages.create(**kw)
        return message.usage.input_tokens, message.usage.output_tokens
    finally:
        client.close()


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("overridden", [False, True])
def test_a_usage_override_reaches_the_client_the_log_the_metrics_and_the_inspector(
        harness, start_server, mock, tmp_path, stream, overridden):
    cfg = _config(harness)
    if overridden:
        rules = tmp_path / "rules" / "openai_chat_completions"
        rules.mkdir(parents=True)
        (rules / "protocol.yaml").write_text(OVERRIDE)
        cfg["rules_dir"] = str(tmp_path / "rules")
    srv = start_server(cfg)
    want = 10 if overridden else 100
    mock.enqueue(Turn([Text("hello")], usage=Usage(input_tokens=100, output_tokens=7)))

    # An Anthropic client of a Chat provider: the usage is translated (Chat -> IR -> Anthropic).
    assert _ask(srv, stream) == (want, 7)
    assert mock.requests[-1].path.endswith("/chat/completions")

    logged = srv.request_records_of("/v1/messages")
    assert [(r["input_tokens"], r["output_tokens"]) for r in logged] == [(want, 7)]
    metrics = srv.get("/metrics").decode()
    assert (_tokens(metrics, "input"), _tokens(metrics, "output")) == (want, 7)
    import json

    rows = json.loads(srv.get("/_proxai/api/requests"))["requests"]
    assert [(r["input_tokens"], r["output_tokens"]) for r in rows if r["path"] == "/v1/messages"] == [(want, 7)]


def test_engine_summary_reads_usage_with_the_codecs_template(tmp_path):
    """Engine.summary and response.decode share protocol.usage_in: one override, both change."""
    import engine

    body = {"id": "c1", "object": "chat.completion", "created": 1, "model": "gpt-x",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 30}}}
    built_in = engine.Engine.load()
    assert built_in.summary("openai_chat_completions", body) == {
        "usage": {"input_tokens": 100, "cached_tokens": 30, "output_tokens": 7}, "stop": "max_tokens",
        "model": "gpt-x", "id": "c1"}
    (tmp_path / "openai_chat_completions").mkdir()
    (tmp_path / "openai_chat_completions" / "protocol.yaml").write_text(OVERRIDE)
    eng = engine.Engine.load(tmp_path)
    assert eng.summary("openai_chat_completions", body)["usage"] == {"input_tokens": 10, "output_tokens": 7}
    ctx = engine.Context(client_protocol="anthropic_messages", provider_protocol="openai_chat_completions")
    assert eng.decode_response(ctx, body)["usage"] == {"input_tokens": 10, "output_tokens": 7}
    # A body the rules cannot read gives no usage, never an error.
    assert eng.summary("openai_chat_completions", b"not json") == {}
    assert re.fullmatch(r"\{.*\}", str(eng.summary("openai_chat_completions", {"usage": "x"})))
