"""The "Responses API coverage" table of docs/responses-api.md is kept true: it has a row for
every endpoint the server routes under /v1/responses and /v1/conversations (and none for
an endpoint it does not), and each cell is what a real call through the server toward a
mock provider of that column's protocol shows:

* native: the provider received the operation (or the parameter) and it succeeded, or the
  provider's own answer was relayed;
* emulated: it succeeded and the provider never saw it (the proxy did it);
* refused: a 400 or 404 in OpenAI's error shape, and the provider was not called.

A row added to the table needs a probe here (PROBES): a function that makes the call and
says whether the provider received it."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import httpx2 as httpx
import pytest
import websockets.sync.client

from interactions_clients import interactions_config
from harness import CLIENT_KEY
from proxai.mock import Text, Turn

DOC = Path(__file__).resolve().parent.parent / "docs" / "responses-api.md"
PREFIXES = ("/v1/responses", "/v1/conversations")
# Column (a provider protocol) -> the route of interactions_config that reaches its mock.
ROUTES = {"openai_chat_completions": "chat", "anthropic_messages": "anthropic",
          "gemini_generate_content": "gemini", "openai_responses": "responses", "gemini_interactions": "interactions"}
VERDICTS = ("native", "emulated", "refused")


def coverage_table() -> tuple[list[str], dict[tuple[str, str], dict[str, str]]]:
    """The table under the "Responses API coverage" heading: its provider columns, and per
    (endpoint, parameter) row each column's verdict (the cell's first word)."""
    text = DOC.read_text()
    section = text.split("## Responses API coverage", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip().strip("`") for cell in lines[0].strip("|").split("|")]
    assert header[:2] == ["endpoint", "parameter"], header
    columns = header[2:]
    rows: dict[tuple[str, str], dict[str, str]] = {}
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        key = (cells[0].strip("`"), cells[1].strip("`"))
        assert key not in rows, f"row {key} is in the table twice"
        rows[key] = {column: (cell.split() or [""])[0] for column, cell in zip(columns, cells[2:])}
    return columns, rows


COLUMNS, ROWS = coverage_table()


def test_the_table_has_a_cell_for_every_provider_protocol_and_only_known_verdicts():
    from proxai import protocols

    assert sorted(COLUMNS) == sorted(protocols.names()) == sorted(ROUTES)
    for key, cells in ROWS.items():
        assert set(cells) == set(COLUMNS), key
        assert set(cells.values()) <= set(VERDICTS), (key, cells)


def routed(app) -> set[str]:
    out = set()
    for route in app.router.routes():
        path = route.resource.canonical if route.resource is not None else ""
        if route.method in ("HEAD", "*") or not path.startswith(PREFIXES):
            continue
        out.add(f"{route.method} {path}")
    return out


def test_every_routed_endpoint_has_a_row_and_every_row_is_routed(harness, start_proxy):
    proxy = start_proxy(interactions_config(harness.mock_url))
    endpoints = routed(proxy.app)
    documented = {endpoint for endpoint, _ in ROWS}
    assert endpoints - documented == set(), "routed endpoints missing from docs/responses-api.md"
    assert documented - endpoints == set(), "rows of docs/responses-api.md for endpoints the server does not route"
    for endpoint in endpoints:
        assert (endpoint, "") in ROWS, f"{endpoint} has parameter rows but no row of its own"


# --- the probes ---------------------------------------------------------------------------


@dataclass
class Seen:
    status: int
    body: dict
    reached: bool  # the provider received the operation or the parameter itself
    relayed: bool = False  # the answer is the provider's own (a native non-2xx)


class Env:
    def __init__(self, proxy, mock, protocol: str):
        self.http = httpx.Client(base_url=proxy.url, headers={"Authorization": f"Bearer {CLIENT_KEY}"}, timeout=30)
        self.mock = mock
        self.model = f"{ROUTES[protocol]}/up-model"

    def call(self, method: str, path: str, **kw) -> tuple[int, dict]:
        response = self.http.request(method, path, **kw)
        try:
            body = response.json()
        except ValueError:
            body = {}
        return response.status_code, body

    def respond(self, **extra) -> dict:
        """A response made through the route (the provider answers with text)."""
        self.mock.enqueue(Turn([Text("Hello.")]))
        status, body = self.call("POST", "/v1/responses", json={"model": self.model, "input": "hi", **extra})
        assert status == 200, body
        return body

    def conversation(self) -> dict:
        status, body = self.call("POST", "/v1/conversations",
                                 json={"items": [{"type": "message", "role": "user", "content": "hi"}]})
        assert status == 200, body
        return body

    def mark(self) -> int:
        return len(self.mock.requests)

    def since(self, mark: int) -> list:
        return self.mock.requests[mark:]


def _generate(env: Env, extra: dict, param: str | None) -> Seen:
    env.mock.enqueue(Turn([Text("Hello.")]))
    mark = env.mark()
    status, body = env.call("POST", "/v1/responses", json={"model": env.model, "input": "hi", **extra})
    sent = [r.body or {} for r in env.since(mark) if r.method == "POST"]
    reached = bool(sent) if param is None else any(param in b for b in sent)
    return Seen(status, body, reached)


def _with_param(name: str, value):
    return lambda env: _generate(env, {name: value}, name)


def _previous_response_id(env: Env) -> Seen:
    first = env.respond()
    return _generate(env, {"previous_response_id": first["id"]}, "previous_response_id")


def _conversation(env: Env) -> Seen:
    return _generate(env, {"conversation": env.conversation()["id"]}, "conversation")


def _input_tokens(env: Env) -> Seen:
    mark = env.mark()
    status, body = env.call("POST", "/v1/responses/input_tokens", json={"model": env.model, "input": "hi"})
    return Seen(status, body, bool(env.since(mark)))


def _stored(method: str, suffix: str = ""):
    def probe(env: Env) -> Seen:
        response_id = env.respond()["id"]
        mark = env.mark()
        status, body = env.call(method, f"/v1/responses/{response_id}{suffix}")
        forwarded = [r for r in env.since(mark) if r.method == method and response_id in r.path]
        # The mock keeps no responses: a forwarded call gets its own 404, relayed.
        relayed = bool(forwarded) and "no route for" in str(body)
        return Seen(status, body, bool(forwarded), relayed)

    return probe


def _background_run(env: Env) -> str:
    """A background response still running (its provider answers slowly)."""
    env.mock.enqueue(Turn([Text("one two three four", chunks=["one ", "two ", "three ", "four"])], delay_secs=0.2))
    status, body = env.call("POST", "/v1/responses", json={"model": env.model, "input": "hi", "background": True})
    assert status == 200 and body["background"] is True, body
    return body["id"]


def _resume(env: Env) -> Seen:
    response_id = _background_run(env)
    mark = env.mark()
    response = env.http.get(f"/v1/responses/{response_id}", params={"stream": "true", "starting_after": "2"})
    numbers = [int(n) for n in re.findall(r'"sequence_number":(\d+)', response.text)]
    assert numbers and min(numbers) == 3 and "response.completed" in response.text, response.text[-500:]
    return Seen(response.status_code, {}, any(r.method == "GET" for r in env.since(mark)))


def _cancel(env: Env) -> Seen:
    response_id = _background_run(env)
    mark = env.mark()
    status, body = env.call("POST", f"/v1/responses/{response_id}/cancel")
    assert status != 200 or body["status"] == "cancelled", body
    return Seen(status, body, any("/cancel" in r.path for r in env.since(mark)))


def _conversations(method: str, suffix: str = "", body=None, item: bool = False):
    def probe(env: Env) -> Seen:
        conversation_id = env.conversation()["id"] if suffix is not None else ""
        path = f"/v1/conversations/{conversation_id}{suffix}" if conversation_id else "/v1/conversations"
        if item:
            status, items = env.call("GET", f"/v1/conversations/{conversation_id}/items")
            path += "/" + items["data"][0]["id"]
        mark = env.mark()
        status, answer = env.call(method, path, **({"json": body} if body is not None else {}))
        return Seen(status, answer, bool(env.since(mark)))

    return probe


def _compact(env: Env) -> Seen:
    env.mock.enqueue(Turn([Text("<summary>The user said hi.</summary>")]))
    mark = env.mark()
    status, body = env.call("POST", "/v1/responses/compact", json={"model": env.model, "input": "hi"})
    return Seen(status, body, any(r.path.endswith("/compact") for r in env.since(mark)))


def _compaction_trigger(env: Env) -> Seen:
    env.mock.enqueue(Turn([Text("<summary>The user said hi.</summary>")]))
    mark = env.mark()
    status, body = env.call("POST", "/v1/responses", json={
        "model": env.model, "store": False, "input": [{"role": "user", "content": "hi"}, {"type": "compaction_trigger"}]})
    reached = any("compaction_trigger" in json.dumps(r.body) for r in env.since(mark))
    return Seen(status, body, reached)


def _compaction_item(env: Env) -> Seen:
    made = _compaction_trigger(env).body.get("output") or []
    # a Responses provider compacts itself (the mock does not): its own opaque item
    item = next((i for i in made if i.get("type") == "compaction"),
                {"type": "compaction", "encrypted_content": "provider-opaque"})
    env.mock.enqueue(Turn([Text("Hello.")]))
    mark = env.mark()
    status, body = env.call("POST", "/v1/responses", json={
        "model": env.model, "store": False, "input": [item, {"role": "user", "content": "go on"}]})
    reached = any('"compaction"' in json.dumps(r.body) for r in env.since(mark))
    return Seen(status, body, reached)


def _socket(extra: dict, param: str | None, warm_up: bool = False):
    """One turn over the Responses WebSocket (after a warm-up, or a first turn, the second
    naming it): the provider only ever gets HTTP, so the socket itself never reaches it."""
    def probe(env: Env) -> Seen:
        env.mock.enqueue(Turn([Text("Hello.")]), Turn([Text("Hello.")]))
        url = str(env.http.base_url).replace("http", "ws", 1).rstrip("/") + "/v1/responses"
        with websockets.sync.client.connect(url, additional_headers={"Authorization": f"Bearer {CLIENT_KEY}"}) as ws:
            def turn(body: dict) -> dict:
                ws.send(json.dumps({"type": "response.create", "model": env.model, **body}))
                while True:
                    event = json.loads(ws.recv())
                    if event["type"] in ("response.completed", "response.failed", "error"):
                        return event
            first = None
            if param == "previous_response_id":
                first = turn({"input": "hi", **({"generate": False} if warm_up else {}), **extra})
            mark = env.mark()
            body = dict(extra)
            if first is not None:
                body["previous_response_id"] = first["response"]["id"]
            last = turn({"input": "hi", **body})
        sent = [r.body or {} for r in env.since(mark) if r.method == "POST"]
        status = last.get("status", 200) if last["type"] == "error" else 200
        return Seen(status, last if last["type"] == "error" else last["response"],
                    param is not None and any(param in b for b in sent))
    return probe


def _configuration_update(env: Env) -> Seen:
    env.mock.enqueue(Turn([Text("Hello.")]))
    mark = env.mark()
    status, body = env.call("POST", "/v1/responses", json={"model": env.model, "store": False, "input": [
        {"role": "user", "content": "hi"}, {"type": "configuration_update", "reasoning": {"effort": "low"}}]})
    return Seen(status, body, any("configuration_update" in json.dumps(r.body) for r in env.since(mark)))


PROBES = {
    ("GET /v1/responses", ""): _socket({}, None),
    ("GET /v1/responses", "previous_response_id, store: false"): _socket({"store": False}, "previous_response_id"),
    ("GET /v1/responses", "generate: false"): _socket({"store": False}, "previous_response_id", warm_up=True),
    ("POST /v1/responses", ""): lambda env: _generate(env, {}, None),
    ("POST /v1/responses", "previous_response_id"): _previous_response_id,
    ("POST /v1/responses", "conversation"): _conversation,
    ("POST /v1/responses", "background"): _with_param("background", True),
    ("POST /v1/responses", "prompt"): _with_param("prompt", {"id": "pmpt_1"}),
    ("POST /v1/responses", "truncation: auto"): _with_param("truncation", "auto"),
    ("POST /v1/responses", "context_management"): _with_param("context_management", [{"type": "compaction"}]),
    ("POST /v1/responses", "input: compaction_trigger"): _compaction_trigger,
    ("POST /v1/responses", "input: compaction"): _compaction_item,
    ("POST /v1/responses", "input: configuration_update"): _configuration_update,
    ("POST /v1/responses/compact", ""): _compact,
    ("POST /v1/responses/input_tokens", ""): _input_tokens,
    ("GET /v1/responses/{response_id}", ""): _stored("GET"),
    ("GET /v1/responses/{response_id}", "starting_after"): _resume,
    ("POST /v1/responses/{response_id}/cancel", ""): _cancel,
    ("DELETE /v1/responses/{response_id}", ""): _stored("DELETE"),
    ("GET /v1/responses/{response_id}/input_items", ""): _stored("GET", "/input_items"),
    ("POST /v1/conversations", ""): _conversations("POST", None, {"metadata": {"k": "v"}}),
    ("GET /v1/conversations/{conversation_id}", ""): _conversations("GET"),
    ("POST /v1/conversations/{conversation_id}", ""): _conversations("POST", "", {"metadata": {"k": "v"}}),
    ("DELETE /v1/conversations/{conversation_id}", ""): _conversations("DELETE"),
    ("GET /v1/conversations/{conversation_id}/items", ""): _conversations("GET", "/items"),
    ("POST /v1/conversations/{conversation_id}/items", ""):
        _conversations("POST", "/items", {"items": [{"role": "user", "content": "more"}]}),
    ("GET /v1/conversations/{conversation_id}/items/{item_id}", ""): _conversations("GET", "/items", item=True),
    ("DELETE /v1/conversations/{conversation_id}/items/{item_id}", ""): _conversations("DELETE", "/items", item=True),
}


def observed(seen: Seen) -> str:
    if seen.reached and (200 <= seen.status < 300 or seen.relayed):
        return "native"
    if not seen.reached and 200 <= seen.status < 300:
        return "emulated"
    if not seen.reached and seen.status in (400, 404) and isinstance(seen.body.get("error"), dict):
        error = seen.body["error"]
        assert set(error) >= {"message", "type", "param", "code"}, error  # OpenAI's shape
        return "refused"
    return f"neither (status {seen.status}, provider {'reached' if seen.reached else 'not reached'}: {seen.body})"


def test_every_row_has_a_probe():
    assert set(ROWS) - set(PROBES) == set(), "rows without a probe in tests/test_responses_coverage.py"
    assert set(PROBES) - set(ROWS) == set(), "probes for rows the table no longer has"


@pytest.fixture(scope="module")
def coverage_proxy(harness):
    doc = interactions_config(harness.mock_url)
    doc["state"] = {"backend": "memory"}
    proxy = harness.start_proxy(doc)
    yield proxy
    proxy.stop()


@pytest.mark.parametrize("protocol", list(ROUTES))
@pytest.mark.parametrize("row", sorted(ROWS), ids=lambda row: f"{row[0]} {row[1]}".strip())
def test_each_cell_is_what_the_server_does(coverage_proxy, mock, row, protocol):
    env = Env(coverage_proxy, mock, protocol)
    try:
        assert observed(PROBES[row](env)) == ROWS[row][protocol], f"{row} toward {protocol}"
    finally:
        env.http.close()


def test_a_refused_cell_really_is_refused_with_the_field_named(coverage_proxy, mock):
    refused = [(row, protocol) for row, cells in ROWS.items() for protocol, verdict in cells.items()
               if verdict == "refused" and row[1]]
    assert refused  # the table has parameter rows that some provider refuses
    for (endpoint, parameter), protocol in refused:
        env = Env(coverage_proxy, mock, protocol)
        seen = PROBES[(endpoint, parameter)](env)
        env.http.close()
        name = re.split(r"[:.\s]", parameter)[0]
        assert seen.status == 400 and seen.body["error"]["param"] == name, (endpoint, parameter, protocol, seen.body)
