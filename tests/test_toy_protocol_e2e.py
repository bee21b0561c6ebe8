"""A protocol is one unit: Toy Talk, a made-up wire protocol, is one rules folder
(tests/fixtures/protocols/toy_chat/: protocol.yaml, the six codec directions, its
tables and one hooks module) and nothing else. A rules_dir holding it makes the real
server (server.py) speak it to clients and to providers: its endpoint, its errors, its
usage in the log line and the metrics, its stream."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from aiohttp import web

from proxai.mock import Error, Text, Turn, Usage, serve_in_thread

ROOT = Path(__file__).resolve().parent.parent
RULES = ROOT / "tests" / "fixtures" / "protocols"
TURNS = [{"who": "user", "say": "hi"}, {"who": "bot", "say": "hello"}, {"who": "user", "say": "how are you?"}]


class ToyUpstream:
    """A provider that speaks Toy Talk: POST /v1/talk, keyed by X-Toy-Key."""

    def __init__(self):
        self.requests: list[tuple[dict, dict]] = []   # (headers, body)
        self.app = web.Application()
        self.app.router.add_post("/v1/talk", self.talk)

    async def talk(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(({k.lower(): v for k, v in request.headers.items()}, body))
        if body["model"] == "busy":
            return web.json_response({"problem": {"status": 429, "text": "the toy is busy", "field": None}}, status=429)
        if not body.get("stream"):
            return web.json_response({"id": "toy-1", "model": body["model"], "say": "Fine, thanks.", "end": "done",
                                      "words": {"in": 6, "out": 2}}, headers={"x-toy-request": "toyreq-1"})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in ({"type": "hello", "id": "toy-2", "model": body["model"]}, {"type": "piece", "say": "Fine, "},
                      {"type": "piece", "say": "thanks."}, {"type": "bye", "end": "limit", "words": {"in": 6, "out": 2}}):
            await response.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())
        await response.write_eof()
        return response


@pytest.fixture
def toy_upstream():
    upstream = ToyUpstream()
    with serve_in_thread(upstream.app) as url:
        upstream.url = url
        yield upstream


@pytest.fixture
def server(harness, start_server, toy_upstream):
    cfg = harness.default_config()
    cfg["rules_dir"] = str(RULES)
    cfg["providers"]["toy"] = {"protocol": "toy_chat", "base_url": toy_upstream.url, "api_key": "toy-provider-key",
                               "read_idle_timeout_secs": 10}
    cfg["routing"]["routes"].append({"name": "toy", "model_pattern": "^toy/(.+)$", "provider": "toy", "upstream_model": "$1"})
    cfg["routing"]["default_providers"]["toy_chat"] = "chat"
    return start_server(cfg)


def post(srv, path: str, body: dict) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(srv.url + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def events(raw: bytes) -> list[tuple[str, dict]]:
    out = []
    for block in raw.decode().split("\n\n"):
        lines = [line for line in block.splitlines() if line]
        if not lines:
            continue
        assert not any(line.startswith(":") for line in lines), "an SSE comment to a client that takes none"
        name = next(line[7:] for line in lines if line.startswith("event: "))
        out.append((name, json.loads(next(line[6:] for line in lines if line.startswith("data: ")))))
    return out


def tokens(metrics: str, kind: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines()
               if line.startswith("proxai_tokens_total{") and f'kind="{kind}"' in line)


def test_the_protocol_is_its_rules_folder_only():
    files = sorted(p.name for p in (RULES / "toy_chat").iterdir() if not p.name.startswith("__"))
    assert files == ["enums.yaml", "hooks.py", "protocol.yaml", "request.decode.yaml", "request.encode.yaml",
                     "response.decode.yaml", "response.encode.yaml", "stream.decode.yaml", "stream.encode.yaml",
                     "tables.yaml"]
    for folder in ("proxai", "engine", "rules", "schemas"):
        named = [str(p.relative_to(ROOT)) for p in (ROOT / folder).rglob("*") if p.is_file()
                 and p.suffix in (".py", ".yaml", ".json") and "toy_chat" in p.read_text(errors="replace")]
        assert named == [], f"{folder}/ knows the fixture protocol"


def test_a_toy_client_of_a_chat_provider(server, mock):
    mock.enqueue(Turn([Text("I am well.")], usage=Usage(input_tokens=12, output_tokens=4)))
    status, headers, raw = post(server, "/v1/talk", {"model": "chat/gpt-x", "system": "be brief", "max_words": 30,
                                                     "turns": TURNS})
    assert status == 200, raw
    answer = json.loads(raw)
    assert {k: answer[k] for k in ("say", "end", "words")} == {
        "say": "I am well.", "end": "done", "words": {"in": 12, "out": 4}}
    # The Chat provider got the conversation translated by the toy's request.decode.
    sent = mock.requests[-1]
    assert sent.path == "/v1/chat/completions"
    assert sent.body["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                                     {"role": "assistant", "content": "hello"}, {"role": "user", "content": "how are you?"}]
    assert sent.body["max_completion_tokens"] == 30
    # The toy SDK's request-id header (descriptor headers.request_id) carries the provider's id.
    assert headers.get("x-toy-request") and headers.get("x-proxai-request-id")
    # Usage in the log line and the metrics, read by the rules.
    logged = [r for r in server.request_records() if r.get("path") == "/v1/talk"]
    assert [(r["client_protocol"], r["input_tokens"], r["output_tokens"]) for r in logged] == [("toy_chat", 12, 4)]
    metrics = server.get("/metrics").decode()
    assert (tokens(metrics, "input"), tokens(metrics, "output")) == (12, 4)


def test_a_toy_client_stream(server, mock):
    mock.enqueue(Turn([Text("I am well.")], usage=Usage(input_tokens=12, output_tokens=4)))
    status, headers, raw = post(server, "/v1/talk", {"model": "chat/gpt-x", "stream": True, "turns": TURNS})
    assert status == 200 and headers["Content-Type"].startswith("text/event-stream")
    got = events(raw)
    assert [name for name, _ in got][0] == "hello" and got[-1] == ("bye", {"type": "bye", "end": "done",
                                                                           "words": {"in": 12, "out": 4}})
    assert "".join(data["say"] for name, data in got if name == "piece") == "I am well."
    assert mock.requests[-1].body["stream"] is True


def test_toy_errors_are_in_the_toy_shape(server, mock):
    # The client's own mistake: a 400 naming the field, before any provider is asked.
    asked = len(mock.requests)
    status, _, raw = post(server, "/v1/talk", {"turns": TURNS})
    assert status == 400
    problem = json.loads(raw)["problem"]
    assert problem["status"] == 400 and problem["field"] == "model" and "model" in problem["text"]
    assert len(mock.requests) == asked
    # A provider's error, in the toy's shape.
    mock.enqueue(Error(429, message="slow down"))
    status, _, raw = post(server, "/v1/talk", {"model": "chat/gpt-x", "turns": TURNS})
    assert status == 429
    assert json.loads(raw)["problem"]["text"] == "slow down"


def test_a_chat_client_of_a_toy_provider(server, toy_upstream):
    import openai

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
    try:
        out = client.chat.completions.create(model="toy/talker", max_tokens=9, messages=[
            {"role": "system", "content": "be kind"}, {"role": "user", "content": "how are you?"}])
        assert out.choices[0].message.content == "Fine, thanks."
        assert out.choices[0].finish_reason == "stop"
        assert (out.usage.prompt_tokens, out.usage.completion_tokens) == (6, 2)
        headers, body = toy_upstream.requests[-1]
        # The descriptor's auth header with the provider's key, and its upstream path.
        assert headers["x-toy-key"] == "toy-provider-key" and "authorization" not in headers
        assert body == {"model": "talker", "max_words": 9, "system": "be kind",
                        "turns": [{"who": "user", "say": "how are you?"}]}

        chunks = list(client.chat.completions.create(model="toy/talker", stream=True,
                                                     messages=[{"role": "user", "content": "hi"}]))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Fine, thanks."
        assert [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason] == ["length"]
        assert toy_upstream.requests[-1][1]["stream"] is True

        # The toy provider's error body, read by its errors.decode rules, to the Chat client.
        with pytest.raises(openai.RateLimitError) as err:
            client.chat.completions.create(model="toy/busy", messages=[{"role": "user", "content": "hi"}])
        assert "the toy is busy" in str(err.value)
    finally:
        client.close()
    # The toy provider's usage, read by its summary and stream.decode rules, in the log line.
    logged = [r for r in server.request_records() if r.get("provider") == "toy"]
    assert [(r["provider_protocol"], r["stream"], r["status"], r.get("input_tokens"), r.get("output_tokens"))
            for r in logged] == [("toy_chat", False, 200, 6, 2), ("toy_chat", True, 200, 6, 2),
                                 ("toy_chat", False, 429, None, None)]


def test_the_descriptor_names_the_body_fields_of_the_model_and_the_stream(harness, start_server, mock, tmp_path):
    # A variant of Toy Talk whose bodies name the model `bot` and the stream flag `live`:
    # the server routes and streams by the fields its descriptor names.
    import shutil

    folder = tmp_path / "rules" / "toy_chat"
    shutil.copytree(RULES / "toy_chat", folder)
    descriptor = folder / "protocol.yaml"
    descriptor.write_text(descriptor.read_text().replace(
        "generate: {path: /v1/talk}", "generate: {path: /v1/talk, model: bot, stream: live}", 1))
    decode = folder / "request.decode.yaml"
    decode.write_text(decode.read_text().replace("  model: model\n  stream: stream\n", "  model: bot\n  stream: live\n", 1))
    cfg = harness.default_config()
    cfg["rules_dir"] = str(tmp_path / "rules")
    cfg["routing"]["default_providers"]["toy_chat"] = "chat"
    srv = start_server(cfg)
    mock.enqueue(Turn([Text("I am well.")], usage=Usage(input_tokens=12, output_tokens=4)))
    status, _, raw = post(srv, "/v1/talk", {"bot": "chat/gpt-x", "live": True, "turns": TURNS})
    assert status == 200, raw
    assert [name for name, _ in events(raw)][0] == "hello"
    sent = mock.requests[-1]
    assert sent.body["model"] == "gpt-x" and sent.body["stream"] is True
    # Without the model field, the 400 is the toy's and names the descriptor's field.
    status, _, raw = post(srv, "/v1/talk", {"model": "chat/gpt-x", "turns": TURNS})
    assert status == 400 and json.loads(raw)["problem"]["field"] == "bot", raw
