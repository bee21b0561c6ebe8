"""The inspector page in a real browser: headless Chromium driven by Playwright.

The browser is the system's `chromium` (Debian package), never a Playwright
download. Screenshots go to test-output/inspector/ (kept by CI as artifacts).
"""

from __future__ import annotations

import shutil
import threading
from pathlib import Path

import pytest

from harness import PROVIDER_KEYS
from proxai.mock import Text, Turn, Usage

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "test-output" / "inspector"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PROXY_KEY = "sk-proxy-client-key-SECRET-7f3a"  # the clients' key to the proxy, also the inspector login
SECRETS = [PROXY_KEY, *PROVIDER_KEYS.values()]


@pytest.fixture(autouse=True)
def _own_captures_dir(tmp_path, monkeypatch):
    """The inspector also lists captures on disk: never the machine's own."""
    monkeypatch.setenv("PROXAI_HOME", str(tmp_path))


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')")
    path = _chromium()
    if path is None:
        pytest.skip("no chromium browser on PATH: install Debian's package (apt-get install -y chromium) to run the browser tests")
    with sync_api.sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=path, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def inspector_proxy(harness, start_proxy, mock):
    cfg = harness.default_config()
    cfg["server"] = {"api_keys": [PROXY_KEY], "inspector": {"enabled": True}}
    return start_proxy(cfg)


@pytest.fixture
def page(browser, inspector_proxy):
    context = browser.new_context(viewport={"width": 1480, "height": 940}, device_scale_factor=1,
                                  http_credentials={"username": "inspector", "password": PROXY_KEY})
    pg = context.new_page()
    errors: list[str] = []
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    pg.goto(inspector_proxy.url + "/_proxai/")
    pg.wait_for_selector("#live.on")  # the event stream is connected
    yield pg
    context.close()
    assert not errors, f"script errors on the page: {errors}"


def shot(page, name: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(OUT / f"{name}.png"), full_page=True)


def row(page, request_id: str):
    return page.locator(f'tr.req-row[data-request-id="{request_id}"]')


def assert_no_credentials(page) -> None:
    page.evaluate("() => document.querySelectorAll('details').forEach((d) => { d.open = true; })")
    html = page.content()
    for secret in SECRETS:
        assert secret not in html


def timeline_rows(page) -> list[dict]:
    return page.evaluate("""() => [...document.querySelectorAll('#timeline tr.tl-row')].map((tr) => ({
        n: tr.dataset.n,
        upstream: tr.querySelector('td.upstream').innerText,
        client: [...tr.querySelectorAll('td.client .ev')].map((e) => e.innerText),
        clientText: tr.querySelector('td.client').innerText,
    }))""")


def test_live_list_phases_timeline_filters_and_no_credentials(page, inspector_proxy, mock):
    p = inspector_proxy
    assert page.locator("#empty").is_visible()

    # A translated stream (Chat client, Anthropic provider), slow enough to be seen in flight.
    mock.enqueue(Turn(blocks=[Text("Hello from the inspector", chunks=["Hello ", "from ", "the ", "inspector"])],
                      usage=Usage(12, 4), delay_secs=0.4))
    received: list[str] = []

    def run_stream():
        client = p.openai(api_key=PROXY_KEY)
        stream = client.chat.completions.create(
            model="anthropic/claude-demo", stream=True, metadata={"team": "qa"},
            messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}],
            extra_headers={"x-request-id": "ui-stream"})
        received.append("".join(c.choices[0].delta.content or "" for c in stream if c.choices))

    worker = threading.Thread(target=run_stream)
    worker.start()
    # appears without a reload, first in flight, then finished
    row(page, "ui-stream").locator(".badge.run.status").wait_for(timeout=10_000)
    worker.join(20)
    assert received == ["Hello from the inspector"]
    row(page, "ui-stream").locator(".badge.status", has_text="200").wait_for(timeout=10_000)
    stream_row = row(page, "ui-stream")
    assert "complete" in stream_row.locator(".outcome").inner_text()
    assert stream_row.locator(".tokens").inner_text() == "12 / 4"
    assert stream_row.locator(".duration").inner_text().endswith("s")
    assert stream_row.locator(".ttfb").inner_text().endswith("s")
    # the protocols by their descriptors' titles, coloured by API family
    assert stream_row.locator(".pair .proto").all_inner_texts() == ["OpenAI Chat Completions", "Anthropic Messages"]
    assert stream_row.locator(".pair .proto").first.get_attribute("class") == "proto openai"

    # two more, on other protocols, for the filters
    p.openai(api_key=PROXY_KEY).responses.create(model="chat/gpt-demo", input="hi", extra_headers={"x-request-id": "ui-responses"})
    p.anthropic(api_key=PROXY_KEY).messages.create(model="claude-demo", max_tokens=20, messages=[{"role": "user", "content": "hi"}],
                                                   extra_headers={"x-request-id": "ui-anthropic"})
    row(page, "ui-responses").wait_for()
    row(page, "ui-anthropic").wait_for()
    assert page.locator("tr.req-row").count() == 3

    # one request opened: the four phases, with the translation's differences marked
    stream_row.click()
    provider = page.locator('.phase[data-phase="provider_request"]')
    provider.locator(".json").wait_for()
    client = page.locator('.phase[data-phase="inbound_request"]')
    assert '"anthropic/claude-demo"' in client.inner_text()
    assert '"claude-demo"' in provider.inner_text()
    assert "POST /v1/chat/completions" in client.locator(".start").inner_text()
    assert provider.locator(".start").inner_text().endswith("/v1/messages HTTP/1.1")
    added = provider.locator(".jl.added").all_inner_texts()
    assert any('"max_tokens": 4096' in t for t in added) and any('"system": "Be brief."' in t for t in added)
    assert any('"model": "claude-demo"' in t for t in provider.locator(".jl.changed").all_inner_texts())
    assert any('"metadata"' in t for t in client.locator(".jl.removed").all_inner_texts())
    client.locator("details.headers summary").click()
    assert client.locator("td.redacted").count() >= 1  # Authorization
    upstream = page.locator('.phase[data-phase="upstream_response"]')
    assert "content_block_delta" in upstream.inner_text()
    assert "chat.completion.chunk" in page.locator('.phase[data-phase="outbound_response"]').inner_text()
    shot(page, "phases")

    # the stream timeline: each upstream event beside the client events it produced
    page.click("#subtab-timeline")
    page.locator('#stream-end[data-reason="complete"]').wait_for()
    rows = timeline_rows(page)
    deltas = [r for r in rows if r["upstream"].startswith("content_block_delta")]
    assert [len(r["client"]) for r in deltas] == [1, 1, 1, 1]
    for r, text in zip(deltas, ["Hello ", "from ", "the ", "inspector"]):
        assert f'"text":"{text}"' in r["upstream"] and f'"content":"{text}"' in r["client"][0]
    ping = next(r for r in rows if r["upstream"].startswith("ping"))
    assert ping["client"] == [] and "nothing sent" in ping["clientText"]
    stop = next(r for r in rows if r["upstream"].startswith("message_stop"))
    assert "[DONE]" in stop["client"][-1] and any("finish_reason" in c and "stop" in c for c in stop["client"])
    assert page.locator("#timeline tr.tl-row td:nth-child(2)").first.inner_text().startswith("+")
    shot(page, "timeline")
    page.screenshot(path=str(OUT / "overview-timeline.png"))

    # trace lines: the dropped advisory field, by name
    page.click("#subtab-trace")
    assert "dropped advisory field metadata" in page.locator("#traces").inner_text()

    # filters
    page.select_option("#f-client", "openai_responses")
    assert [r.get_attribute("data-request-id") for r in page.locator("tr.req-row").all()] == ["ui-responses"]
    assert page.locator("#count").inner_text() == "1 of 3 requests"
    page.select_option("#f-client", "")
    page.select_option("#f-provider", "anthropic")
    assert sorted(r.get_attribute("data-request-id") for r in page.locator("tr.req-row").all()) == ["ui-anthropic", "ui-stream"]
    page.select_option("#f-model", "claude-demo")
    assert [r.get_attribute("data-request-id") for r in page.locator("tr.req-row").all()] == ["ui-anthropic"]
    page.select_option("#f-model", "")
    page.select_option("#f-outcome", "complete")
    assert [r.get_attribute("data-request-id") for r in page.locator("tr.req-row").all()] == ["ui-stream"]
    page.select_option("#f-outcome", "")
    page.select_option("#f-provider", "")
    page.select_option("#f-status", "2xx")
    assert page.locator("tr.req-row").count() == 3
    page.select_option("#f-status", "")

    assert_no_credentials(page)
    stream_row.click()
    page.click('.subtab[data-pane="phases"]')
    page.locator('.phase[data-phase="provider_request"] .json').wait_for()
    page.evaluate("window.scrollTo(0, 0)")
    OUT.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(OUT / "overview.png"))


def test_broken_stream_and_rejected_request(page, inspector_proxy, mock):
    p = inspector_proxy
    mock.enqueue(Turn(blocks=[Text("one two three four five")], cut_after=5))
    client = p.openai(api_key=PROXY_KEY)
    chunks = []
    try:
        for chunk in client.chat.completions.create(model="anthropic/x", stream=True, messages=[{"role": "user", "content": "hi"}],
                                                    extra_headers={"x-request-id": "ui-cut"}):
            chunks.append(chunk)
    except Exception:
        pass  # the SDK raises on the in-stream error
    row(page, "ui-cut").locator(".outcome", has_text="cut").wait_for(timeout=10_000)
    row(page, "ui-cut").click()
    page.click("#subtab-timeline")
    page.locator('#stream-end[data-reason="cut"]').wait_for()
    assert "before its terminal event" in page.locator("#stream-end").inner_text()
    tail = page.locator("#timeline tr.tail")
    assert "error" in tail.inner_text()
    shot(page, "cut-stream")

    try:
        client.chat.completions.create(model="anthropic/x", n=2, messages=[{"role": "user", "content": "hi"}],
                                       extra_headers={"x-request-id": "ui-400"})
    except Exception:
        pass
    row(page, "ui-400").locator(".badge.status", has_text="400").wait_for(timeout=10_000)
    row(page, "ui-400").click()
    page.click("#subtab-trace")
    box = page.locator("#error-box")
    box.wait_for()
    assert "n > 1" in box.inner_text()
    assert "anthropic_messages/request.encode.yaml:" in box.locator(".rule").inner_text()
    assert_no_credentials(page)
    shot(page, "rejected-request")


def test_translate_tab(page):
    page.click("#tab-translate")
    page.select_option("#t-kind", "request")
    page.select_option("#t-from", "openai_chat_completions")
    page.select_option("#t-to", "anthropic_messages")
    page.fill("#t-body", '{"model": "m", "store": true, "messages": [{"role": "user", "content": "hi"}]}')
    page.click("#t-run")
    page.locator("#t-output", has_text="max_tokens").wait_for()
    assert '"type": "text"' in page.locator("#t-output").inner_text()
    assert "dropped advisory field store" in page.locator("#t-traces").inner_text()
    shot(page, "translate")

    page.fill("#t-body", '{"model": "m", "n": 2, "messages": [{"role": "user", "content": "hi"}]}')
    page.click("#t-run")
    page.locator("#t-error .rule").wait_for()
    assert "request.encode.yaml:" in page.locator("#t-error .rule").inner_text()
    assert page.locator("#t-output").inner_text() == ""

    # a recorded stream, the other way round (provider's protocol first)
    page.select_option("#t-kind", "stream")
    page.select_option("#t-from", "anthropic_messages")
    page.select_option("#t-to", "openai_chat_completions")
    page.fill("#t-body", "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_1\",\"type\":\"message\","
                         "\"role\":\"assistant\",\"model\":\"m\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":1,"
                         "\"output_tokens\":0}}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":"
                         "\"end_turn\"},\"usage\":{\"output_tokens\":1}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
    page.click("#t-run")
    page.locator("#t-output", has_text="chat.completion.chunk").wait_for()


def test_requests_captured_to_disk_by_an_earlier_run(page, harness, start_proxy, mock, tmp_path, monkeypatch):
    monkeypatch.setenv("PROXAI_HOME", str(tmp_path))
    cfg = harness.default_config()
    cfg["capture"] = dict.fromkeys(("inbound_request", "provider_request", "upstream_response", "outbound_response"), True)
    earlier = start_proxy(cfg)  # no inspector: only the capture files remain
    mock.enqueue(Turn(blocks=[Text("Hello disk", chunks=["Hello ", "disk"])]))
    stream = earlier.openai(api_key=PROXY_KEY).chat.completions.create(
        model="anthropic/claude-demo", stream=True, messages=[{"role": "user", "content": "hi"}],
        extra_headers={"x-request-id": "ui-disk"})
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "Hello disk"

    page.click("#refresh")
    disk_row = row(page, "ui-disk")
    disk_row.wait_for()
    assert "disk" in disk_row.locator(".rid").inner_text()
    disk_row.click()
    page.locator('.phase[data-phase="provider_request"] .json').wait_for()
    assert '"claude-demo"' in page.locator('.phase[data-phase="provider_request"]').inner_text()
    page.click("#subtab-timeline")
    page.locator('#stream-end[data-reason="complete"]').wait_for()
    deltas = [r for r in timeline_rows(page) if r["upstream"].startswith("content_block_delta")]
    assert [len(r["client"]) for r in deltas] == [1, 1]
    assert '"content":"Hello "' in deltas[0]["client"][0] and '"content":"disk"' in deltas[1]["client"][0]
    assert_no_credentials(page)
    shot(page, "from-disk")
