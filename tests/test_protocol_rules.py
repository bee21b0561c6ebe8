"""protocol.yaml's summary, errors and shared templates: checked by the loader (so by
`proxai lint`) with file:line, and run by Engine.http_error / Engine.parse_error."""
from __future__ import annotations

import pytest

import engine
from engine.errors import UpstreamError
from engine.lint import lint_dirs


def _override(tmp_path, protocol: str, text: str):
    (tmp_path / protocol).mkdir(exist_ok=True)
    (tmp_path / protocol / "protocol.yaml").write_text(f"kind: protocol\nprotocol: {protocol}\n" + text)
    return lint_dirs([tmp_path])


@pytest.mark.parametrize("text, line, words", [
    ("summary:\n  model: {$ref: protocol.nope}\n", 4, "unknown template 'protocol.nope'"),
    ("summary:\n  usage: {input_tokens: $u.prompt_tokens}\n", 4, "summary.usage reads $u"),
    ("templates:\n  usage_in:\n    params: [v]\n    body: {input_tokens: $u.prompt_tokens}\n", 6, "reads $u"),
    ("errors:\n  encode: {type: {$table: http_status->nope, $of: status}}\n", 4, "unknown table 'http_status->nope'"),
    ("summary:\n  tokens: usage\n", 4, "tokens"),
])
def test_lint_reports_a_broken_protocol_section_with_file_and_line(tmp_path, text, line, words):
    problems = _override(tmp_path, "openai_chat_completions", text)
    assert any(f"protocol.yaml:{line}" in p and words in p for p in problems), problems


def test_a_codec_file_refs_a_shared_template_that_an_override_breaks(tmp_path):
    # The codec files $ref protocol.usage_out: an override's bad body is named where it is.
    problems = _override(tmp_path, "openai_chat_completions",
                         "templates:\n  usage_out:\n    params: [u]\n    body: {prompt_tokens: {$hook: no.such}}\n")
    assert any("protocol.yaml:6" in p and "no.such" in p for p in problems), problems


def test_the_built_in_protocol_rules_lint_clean():
    assert [p for p in lint_dirs([engine.ruleset.BUILTIN_RULES]) if "protocol.yaml" in p] == []


def test_http_error_keeps_a_native_type_only_for_its_own_vocabulary():
    eng = engine.Engine.load()
    err = UpstreamError("slow down", status=429, error_type="overloaded_error", type_family="anthropic")
    assert eng.http_error("anthropic_messages", err)["error"]["type"] == "overloaded_error"
    assert eng.http_error("openai_chat_completions", err)["error"]["type"] == "rate_limit_error"
    assert eng.http_error("gemini_generate_content", err)["error"]["status"] == "RESOURCE_EXHAUSTED"


def test_parse_error_reads_each_protocols_error_body():
    eng = engine.Engine.load()
    assert eng.parse_error("anthropic_messages", 529, {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}) == {
        "message": "busy", "error_type": "overloaded_error", "status": 529, "vocabulary": "anthropic"}
    gemini = [{"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED",
                         "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "36.2s"}]}}]
    assert eng.parse_error("gemini_generate_content", 429, gemini) == {
        "message": "quota", "error_type": "RESOURCE_EXHAUSTED", "retry_after": "37", "status": 429, "vocabulary": "gemini"}
    assert eng.parse_error("openai_chat_completions", 502, "<html>") == {"status": 502, "vocabulary": "openai"}


def test_an_override_of_the_error_body_changes_http_errors(tmp_path):
    (tmp_path / "openai_chat_completions").mkdir()
    (tmp_path / "openai_chat_completions" / "protocol.yaml").write_text(
        "kind: protocol\nprotocol: openai_chat_completions\nerrors:\n  encode: {error: {message: message, status: status}}\n")
    eng = engine.Engine.load(tmp_path)
    assert eng.http_error("openai_chat_completions", UpstreamError("no", status=500)) == {"error": {"message": "no", "status": 500}}
    # the rest of the section comes from the built-in file
    assert eng.protocols["openai_chat_completions"].error_vocabulary == "openai"


def test_the_responses_in_stream_error_outside_the_stream_rules_is_its_errors_stream_rule():
    # The state store failing under a translated stream: `error`, then response.failed over
    # the last snapshot (its own fields kept, status and error set), wire as before.
    from proxai.http.errors import render_stream
    from engine.errors import InternalError, RateLimited

    snapshot = {"id": "resp_1", "object": "response", "created_at": 3, "status": "in_progress", "model": "m",
                "output": [{"type": "message", "id": "msg_1"}], "instructions": None, "error": None}
    out = render_stream("openai_responses", InternalError("state failed", code="x", param="p"),
                        sequence_number=7, response=snapshot)
    assert out == (
        b'event: error\ndata: {"type":"error","code":"x","message":"state failed","param":"p","sequence_number":7}\n\n'
        b'event: response.failed\ndata: {"type":"response.failed","sequence_number":8,"response":{"id":"resp_1",'
        b'"object":"response","created_at":3,"model":"m","output":[{"type":"message","id":"msg_1"}],'
        b'"parallel_tool_calls":true,"tool_choice":"auto","tools":[],"usage":null,"incomplete_details":null,'
        b'"status":"failed","instructions":null,"error":{"code":"server_error","message":"state failed"}}}\n\n')
    eng = engine.Engine.load()
    events = eng.stream_error("openai_responses", RateLimited("slow down"), 0, None)
    assert [e["type"] for e in events] == ["error", "response.failed"]
    assert events[1]["response"]["id"] == "resp_failed"   # a valid Response with no snapshot
    assert events[1]["response"]["error"] == {"code": "rate_limit_exceeded", "message": "slow down"}
    # ResponseError.code of a failed background run: an enum member, by the status
    assert eng.failure("openai_responses", RateLimited("slow down")) == {"code": "rate_limit_exceeded", "message": "slow down"}
    assert eng.failure("openai_responses", InternalError("boom"))["code"] == "server_error"


def test_a_protocol_without_an_errors_stream_rule_says_so():
    from engine.errors import InternalError, RuleError

    with pytest.raises(RuleError, match="errors.stream"):
        engine.Engine.load().stream_error("anthropic_messages", InternalError("boom"))


def test_an_override_of_the_failure_rule_changes_the_failed_code(tmp_path):
    from engine.errors import RateLimited

    (tmp_path / "openai_responses").mkdir()
    (tmp_path / "openai_responses" / "protocol.yaml").write_text(
        "kind: protocol\nprotocol: openai_responses\nerrors:\n  failure: {code: !lit server_error, message: message}\n")
    eng = engine.Engine.load(tmp_path)
    assert eng.failure("openai_responses", RateLimited("slow")) == {"code": "server_error", "message": "slow"}
    # the section's other rules come from the built-in file
    assert eng.stream_error("openai_responses", RateLimited("slow"))[1]["response"]["error"]["code"] == "rate_limit_exceeded"


def test_model_in_path_endpoints_are_the_descriptors(tmp_path):
    # endpoints' {model} paths and also_under, not Python prefixes: an override adds a root.
    wire = engine.Engine.load().wire
    found = wire.model_path("/v1/models/models/chat/gpt-4o:streamGenerateContent")
    assert (found.protocol, found.operation, found.stream, found.model) == (
        "gemini_generate_content", "generate", True, "models/chat/gpt-4o")
    assert wire.model_path("/v1beta/models/m:countTokens").operation == "count_tokens"
    assert wire.model_path("/v1beta/models/m:nope") is None and wire.model_path("/v1beta/models/:countTokens") is None
    assert wire.model_path("/v2/models/m:generateContent") is None
    (tmp_path / "gemini_generate_content").mkdir()
    (tmp_path / "gemini_generate_content" / "protocol.yaml").write_text(
        "kind: protocol\nprotocol: gemini_generate_content\nendpoints:\n  also_under: [/v1, /v2]\n")
    wire = engine.Engine.load(tmp_path).wire
    assert wire.model_path("/v2/models/m:generateContent").model == "m"
    assert wire.body_fields("openai_chat_completions") == ("model", "stream")


def test_a_models_section_shapes_the_list_and_its_items():
    eng = engine.Engine.load()
    served = [{"id": "a", "provider": "p", "max_tokens": None}, {"id": "b", "provider": "q", "max_tokens": 10}]
    assert eng.model_list("anthropic_messages", served, True) == {
        "data": [{"type": "model", "id": "a", "display_name": "a", "created_at": "1970-01-01T00:00:00Z", "lifecycle": "active"},
                 {"type": "model", "id": "b", "display_name": "b", "created_at": "1970-01-01T00:00:00Z", "lifecycle": "active",
                  "max_tokens": 10}],
        "has_more": True, "first_id": "a", "last_id": "b"}
    assert eng.model_list("anthropic_messages", []) == {"data": [], "has_more": False, "first_id": None, "last_id": None}
    assert eng.model_item("gemini_generate_content", served[1])["outputTokenLimit"] == 10
    assert eng.model_list("openai_chat_completions", served[:1]) == {
        "object": "list", "data": [{"id": "a", "object": "model", "created": 0, "owned_by": "p"}]}
