"""Gemini client -> Gemini provider: pass-through, with the google-genai SDK as the client
and a small upstream that speaks the Gemini wire format (types.GenerateContentResponse
as JSON, `data:` chunks) and records what it received."""
from __future__ import annotations

import base64
import json

import pytest
from aiohttp import web
from google import genai
from google.genai import errors as genai_errors
from google.genai import types

from harness import CLIENT_KEY
from proxai.mock.upstream import serve_in_thread

PROVIDER_KEY = "g-provider-key-SECRET"
SIGNATURE = base64.b64encode(b"\x01gemini-own-signature\xff").decode()


class GeminiUpstream:
    def __init__(self):
        self.requests: list[dict] = []
        self.replies: list = []
        self.app = web.Application()
        self.app.router.add_post("/v1beta/models/{tail:.+}", self.handle)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        self.requests.append({"path": request.path, "query": request.rel_url.raw_query_string,
                              "headers": {k.lower(): v for k, v in request.headers.items()}, "raw": raw})
        reply = self.replies.pop(0)
        if isinstance(reply, tuple):  # (status, body, headers)
            status, body, headers = reply
            return web.json_response(body, status=status, headers=headers)
        if isinstance(reply, list):  # chunks
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            for chunk in reply:
                await resp.write(b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\r\n\r\n")
            await resp.write_eof()
            return resp
        return web.json_response(reply)


@pytest.fixture
def gemini(harness, start_proxy):
    upstream = GeminiUpstream()
    with serve_in_thread(upstream.app) as url:
        config = harness.default_config()
        config["providers"]["gemini"] = {"protocol": "gemini_generate_content", "base_url": url, "api_key": PROVIDER_KEY,
                                         "read_idle_timeout_secs": 5}
        config["routing"]["routes"].append({"name": "gemini", "model_pattern": "^gemini/(.+)$", "provider": "gemini",
                                            "upstream_model": "$1"})
        p = start_proxy(config)
        client = genai.Client(api_key=CLIENT_KEY, http_options=types.HttpOptions(base_url=p.url))
        yield upstream, client


def response(parts, finish="STOP", usage=None):
    out = {"candidates": [{"content": {"role": "model", "parts": parts}, "index": 0}],
           "modelVersion": "gemini-2.5-flash", "responseId": "resp-1"}
    if finish:
        out["candidates"][0]["finishReason"] = finish
    if usage:
        out["usageMetadata"] = usage
    return out


def test_generate_content_passes_through(gemini):
    upstream, client = gemini
    upstream.replies.append(response([{"text": "thinking", "thought": True, "thoughtSignature": SIGNATURE},
                                      {"functionCall": {"name": "get_time", "args": {}}}],
                                     usage={"promptTokenCount": 12, "candidatesTokenCount": 3, "totalTokenCount": 15}))
    r = client.models.generate_content(model="gemini/gemini-2.5-flash", contents="what time?",
                                       config=types.GenerateContentConfig(tools=[types.Tool(function_declarations=[
                                           types.FunctionDeclaration(name="get_time")])]))
    assert r.function_calls[0].name == "get_time"
    sig = r.candidates[0].content.parts[0].thought_signature
    assert sig == base64.b64decode(SIGNATURE)
    got = upstream.requests[-1]
    assert got["path"] == "/v1beta/models/gemini-2.5-flash:generateContent" and got["query"] == ""
    assert got["headers"]["x-goog-api-key"] == PROVIDER_KEY
    assert CLIENT_KEY not in json.dumps(got["headers"])
    body = json.loads(got["raw"])
    assert body["contents"][0]["parts"][0]["text"] == "what time?"
    # the next turn replays Gemini's own signature byte-identical
    upstream.replies.append(response([{"text": "noon"}]))
    client.models.generate_content(model="gemini/gemini-2.5-flash", contents=[
        types.Content(role="user", parts=[types.Part(text="what time?")]), r.candidates[0].content,
        types.Content(role="user", parts=[types.Part(function_response=types.FunctionResponse(name="get_time", response={"output": "12:00"}))])])
    replayed = json.loads(upstream.requests[-1]["raw"])["contents"][1]["parts"][0]["thoughtSignature"]
    assert base64.urlsafe_b64decode(replayed + "=" * (-len(replayed) % 4)) == base64.b64decode(SIGNATURE)


def test_stream_passes_through(gemini):
    upstream, client = gemini
    upstream.replies.append([response([{"text": "héllo "}], finish=None),
                             response([{"text": "wörld"}], usage={"promptTokenCount": 5, "candidatesTokenCount": 2,
                                                                  "totalTokenCount": 7})])
    chunks = list(client.models.generate_content_stream(model="gemini/gemini-2.5-flash", contents="hi"))
    assert "".join(c.text for c in chunks) == "héllo wörld"
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP
    got = upstream.requests[-1]
    assert got["path"] == "/v1beta/models/gemini-2.5-flash:streamGenerateContent" and got["query"] == "alt=sse"
    assert got["headers"]["x-goog-api-key"] == PROVIDER_KEY


def test_stream_without_finish_reason_is_an_error(gemini):
    upstream, client = gemini
    upstream.replies.append([response([{"text": "partial"}], finish=None)])
    with pytest.raises(genai_errors.APIError) as info:
        list(client.models.generate_content_stream(model="gemini/gemini-2.5-flash", contents="hi"))
    assert info.value.code == 502


def test_upstream_error_passes_through(gemini):
    upstream, client = gemini
    upstream.replies.append((429, {"error": {"code": 429, "message": "quota", "status": "RESOURCE_EXHAUSTED"}},
                             {"Retry-After": "3"}))
    with pytest.raises(genai_errors.ClientError) as info:
        client.models.generate_content(model="gemini/gemini-2.5-flash", contents="hi")
    assert info.value.code == 429 and info.value.status == "RESOURCE_EXHAUSTED"
    assert info.value.response.headers.get("retry-after") == "3"


def test_count_tokens_passes_through(gemini):
    upstream, client = gemini
    upstream.replies.append({"totalTokens": 17})
    assert client.models.count_tokens(model="gemini/gemini-2.5-flash", contents="hi").total_tokens == 17
    assert upstream.requests[-1]["path"] == "/v1beta/models/gemini-2.5-flash:countTokens"
