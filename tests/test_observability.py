"""Request ids and the request log: propagation, both formats, every line of a request tagged."""

from __future__ import annotations

import io
import json
import logging
import time

import pytest

from proxai.observability import logs

from proxai.http import requestid
from proxai.mock import Error, Text, Turn, Usage
from test_passthrough_e2e import MESSAGES, raw_post


class LogCapture:
    """ProxAI's own handler (human or json) on the root logger, writing to memory."""

    def __init__(self, fmt: str = "human", level: int = logging.INFO):
        self.stream = io.StringIO()
        self.handler = logs.make_handler(fmt, self.stream)
        self.level = level

    def __enter__(self) -> "LogCapture":
        root = logging.getLogger()
        self._old = root.level
        root.addHandler(self.handler)
        root.setLevel(self.level)
        return self

    def __exit__(self, *exc) -> None:
        root = logging.getLogger()
        root.removeHandler(self.handler)
        root.setLevel(self._old)

    @property
    def text(self) -> str:
        return self.stream.getvalue()

    def lines_with(self, needle: str, count: int = 1, timeout: float = 3.0) -> list[str]:
        """Lines containing `needle`; waits briefly, since a stream's summary follows its last byte."""
        deadline = time.monotonic() + timeout
        while True:
            found = [line for line in self.text.splitlines() if needle in line]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.01)


def summary(cap: LogCapture, rid: str) -> dict:
    lines = [line for line in cap.lines_with(f'"request_id":"{rid}"') if '"msg":"request"' in line]
    assert len(lines) == 1, cap.text
    return json.loads(lines[0])


# --- request ids ------------------------------------------------------------------------------


def test_client_request_id_is_echoed_and_logged(proxy, mock):
    with LogCapture() as cap:
        status, headers, _ = raw_post(proxy.url, "/v1/chat/completions", {"model": "m", "messages": MESSAGES},
                                      {"x-request-id": "client-abc.123_X"})
        line = cap.lines_with("request_id=client-abc.123_X")
    assert status == 200
    # no provider id came back (the demo upstream sends none): ours stands in the SDK header too
    assert headers["x-proxai-request-id"] == "client-abc.123_X"
    assert headers["x-request-id"] == "client-abc.123_X"
    assert len(line) == 1 and "proxai.request" in line[0]


@pytest.mark.parametrize("given", ["", "x" * 129, "has space", "../../etc/passwd", "a/b", "-leading", "ünïcode", "a\tb"])
def test_unsafe_client_request_id_is_replaced(proxy, mock, given):
    status, headers, _ = raw_post(proxy.url, "/v1/chat/completions", {"model": "m", "messages": MESSAGES},
                                  {"x-request-id": given.encode("utf-8").decode("latin-1")})
    assert status == 200
    assert headers["x-request-id"] != given
    assert headers["x-request-id"].startswith("req_") and len(headers["x-request-id"]) == 28


def test_minted_ids_are_unique_and_on_error_responses(proxy, mock):
    ids = set()
    for _ in range(3):
        status, headers, _ = raw_post(proxy.url, "/v1/chat/completions", b"not json")
        assert status == 400
        ids.add(headers["x-request-id"])
    assert len(ids) == 3
    status, headers, _ = raw_post(proxy.url, "/nowhere", {}, {"x-request-id": "lost-1"})
    assert status == 404 and headers["x-request-id"] == "lost-1"


def test_sanitiser_bounds():
    assert requestid.from_client({"x-request-id": "a" * 128}) == "a" * 128
    assert requestid.from_client({"x-request-id": "a" * 129}).startswith("req_")
    assert requestid.from_client({}).startswith("req_")
    assert requestid.upstream_id({"request-id": "req_011CX"}) == "req_011CX"
    assert requestid.upstream_id({"x-request-id": "bad id\r\n"}) is None
    both = {"x-request-id": "req_oai", "request-id": "req_ant"}
    assert requestid.upstream_id(both, "request-id") == "req_ant"
    assert requestid.upstream_id(both, "x-request-id") == "req_oai"


def test_upstream_request_id_is_logged_and_passed_on_beside_ours(proxy, mock):
    mock.enqueue(Turn([Text("ok")], headers={"x-request-id": "req_openai_77"}))
    with LogCapture("json") as cap:
        status, headers, _ = raw_post(proxy.url, "/v1/chat/completions", {"model": "chat/m", "messages": MESSAGES},
                                      {"x-request-id": "mine-1"})
        line = summary(cap, "mine-1")
    assert status == 200
    # the provider's id under the header the OpenAI SDK reads; ours under x-proxai-request-id
    assert headers["x-request-id"] == "req_openai_77"
    assert headers["x-proxai-request-id"] == "mine-1"
    assert "x-upstream-request-id" not in headers
    assert line["upstream_request_id"] == "req_openai_77"


def test_upstream_error_keeps_both_ids(anthropic_client, mock):
    import anthropic

    mock.enqueue(Error(429, headers={"request-id": "req_ant_5"}, message="slow down"))
    with LogCapture("json") as cap, pytest.raises(anthropic.RateLimitError) as info:
        anthropic_client.messages.create(model="anthropic/c", max_tokens=5, messages=MESSAGES,
                                         extra_headers={"x-request-id": "mine-2"})
    headers = info.value.response.headers
    assert info.value.request_id == "req_ant_5" and headers["request-id"] == "req_ant_5"
    assert headers["x-proxai-request-id"] == "mine-2"
    line = summary(cap, "mine-2")
    assert line["upstream_request_id"] == "req_ant_5" and line["status"] == 429 and line["error"] == "upstream_error"


def test_every_line_of_a_request_carries_its_id(proxy, mock):
    # `prediction` has no slot in Anthropic Messages: the engine drops it with a trace, logged at DEBUG.
    body = {"model": "anthropic/c", "messages": MESSAGES, "prediction": {"type": "content", "content": "x"}}
    for fmt in ("human", "json"):
        with LogCapture(fmt, level=logging.DEBUG) as cap:
            status, _, _ = raw_post(proxy.url, "/v1/chat/completions", body, {"x-request-id": f"trace-{fmt}"})
            cap.lines_with("proxai.request")
        assert status == 200
        lines = [line for line in cap.text.splitlines() if "proxai" in line]
        traces = [line for line in lines if "dropped advisory field prediction" in line]
        assert traces, cap.text
        for line in lines:
            if fmt == "json":
                assert json.loads(line)["request_id"] == "trace-json"
            else:
                assert "request_id=trace-human" in line


def test_dropped_fields_name_the_protocol_without_a_slot_and_info_keeps_one_line(proxy, mock):
    body = {"model": "anthropic/c", "messages": MESSAGES, "prediction": {"type": "content", "content": "x"}}
    with LogCapture("human", level=logging.DEBUG) as cap:
        raw_post(proxy.url, "/v1/chat/completions", body, {"x-request-id": "slot-1"})
        cap.lines_with("proxai.request")
    notes = [line for line in cap.text.splitlines() if "dropped advisory field prediction" in line]
    assert len(notes) == 1 and "(no slot in anthropic_messages)" in notes[0] and " DEBUG " in notes[0]
    with LogCapture("json") as cap:
        raw_post(proxy.url, "/v1/chat/completions", body, {"x-request-id": "slot-2"})
        cap.lines_with("proxai.request")
    lines = [json.loads(line) for line in cap.text.splitlines() if "slot-2" in line]
    assert len(lines) == 1 and lines[0]["msg"] == "request" and lines[0]["translation_notes"] == 1


# --- the summary line -------------------------------------------------------------------------


def test_json_summary_of_a_translated_stream(openai_client, mock):
    mock.enqueue(Turn([Text("Hi there")], usage=Usage(input_tokens=11, output_tokens=4)))
    with LogCapture("json") as cap:
        stream = openai_client.chat.completions.create(model="anthropic/claude-x", messages=MESSAGES, stream=True,
                                                       extra_headers={"x-request-id": "sum-1"})
        list(stream)
        line = summary(cap, "sum-1")
    assert line["client_protocol"] == "openai_chat_completions"
    assert line["provider_protocol"] == "anthropic_messages" and line["provider"] == "anthropic"
    assert line["route"] == "anthropic" and line["model"] == "anthropic/claude-x" and line["upstream_model"] == "claude-x"
    assert line["stream"] is True and line["status"] == 200 and line["outcome"] == "complete"
    assert line["input_tokens"] == 11 and line["output_tokens"] == 4
    assert 0 <= line["ttfb_ms"] <= line["duration_ms"]
    assert line["level"] == "info" and line["logger"] == "proxai.request"


@pytest.mark.parametrize("model,stream", [("chat/m", False), ("chat/m", True), ("responses/m", False), ("anthropic/m", True)])
def test_human_summary_fields(openai_client, mock, model, stream):
    mock.enqueue(Turn([Text("Hi")], usage=Usage(input_tokens=3, output_tokens=2)))
    rid = f"hum-{model.replace('/', '-')}-{stream}"
    with LogCapture("human") as cap:
        out = openai_client.chat.completions.create(model=model, messages=MESSAGES, stream=stream,
                                                    stream_options={"include_usage": True} if stream else None,
                                                    extra_headers={"x-request-id": rid})
        if stream:
            list(out)
        (line,) = cap.lines_with(f"request_id={rid}")
    fields = dict(part.split("=", 1) for part in line.split(": ", 1)[1].split(" "))
    assert fields["client_protocol"] == "openai_chat_completions"
    assert fields["provider_protocol"] == {"chat": "openai_chat_completions", "responses": "openai_responses",
                                           "anthropic": "anthropic_messages"}[model.split("/")[0]]
    assert fields["stream"] == str(stream) and fields["status"] == "200"
    assert fields["input_tokens"] == "3" and fields["output_tokens"] == "2"
    assert float(fields["ttfb_ms"]) <= float(fields["duration_ms"])
    assert ("outcome" in fields) == stream


def test_pass_through_stream_usage_for_each_protocol(proxy, mock):
    client = proxy.openai()
    ant = proxy.anthropic()
    with LogCapture("json") as cap:
        mock.enqueue(Turn([Text("a")], usage=Usage(input_tokens=5, output_tokens=6)))
        list(client.responses.create(model="responses/m", input="hi", stream=True, extra_headers={"x-request-id": "pt-r"}))
        mock.enqueue(Turn([Text("a")], usage=Usage(input_tokens=7, output_tokens=8, cached_tokens=2)))
        list(ant.messages.create(model="anthropic/m", max_tokens=5, messages=MESSAGES, stream=True,
                                 extra_headers={"x-request-id": "pt-a"}))
        r, a = summary(cap, "pt-r"), summary(cap, "pt-a")
    assert (r["input_tokens"], r["output_tokens"]) == (5, 6)
    assert (a["input_tokens"], a["output_tokens"]) == (7, 8)


def test_incomplete_stream_outcome_is_a_warning(openai_client, mock):
    mock.enqueue(Turn([Text("partial answer", chunks=["partial ", "answer"])], cut_after=2))
    with LogCapture("json") as cap:
        with pytest.raises(Exception):
            list(openai_client.chat.completions.create(model="anthropic/m", messages=MESSAGES, stream=True,
                                                       extra_headers={"x-request-id": "cut-1"}))
        line = summary(cap, "cut-1")
    assert line["outcome"].startswith("incomplete") and line["level"] == "warning"
