"""Regenerate the inspector screenshots of docs/inspector.md from the real page.

    .venv/bin/python docs/screenshots.py            # writes docs/inspector.png, docs/inspector-timeline.png
    .venv/bin/python docs/screenshots.py --out DIR  # somewhere else

Starts the demo server with the inspector on a free port, sends a few requests
through it with the official SDKs (a translated Chat -> Anthropic stream, the
one both pictures show, and calls on the other protocols so the list has
something beside it), then opens the stream in headless Chromium (the system's
`chromium`, driven by Playwright, as tests/test_inspector_browser.py does) and
screenshots the phases and the stream timeline.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VIEWPORT = {"width": 1600, "height": 1000}
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
STREAM_ID = "chat-stream"


def start_demo_server(home: str) -> tuple[subprocess.Popen, str]:
    """The demo server with the inspector on; its URL read off the startup log line."""
    env = {**os.environ, "PROXAI_HOME": home}  # the inspector lists captures on disk: never the machine's own
    proc = subprocess.Popen([sys.executable, str(ROOT / "server.py"), "--inspector", "--port", "0"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        m = re.search(r"serving demo mode .* on (http://\S+)", line)
        if m:
            # keep draining the log so the server never blocks on a full pipe
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, m.group(1)
    proc.wait()
    raise SystemExit(f"the demo server did not start (exit {proc.returncode})")


def send_requests(url: str) -> None:
    """The requests the list shows; the Chat -> Anthropic stream is the one opened."""
    import anthropic
    import openai
    from google import genai

    oa = openai.OpenAI(base_url=url + "/v1", api_key="anything")
    stream = oa.chat.completions.create(
        model="anthropic/demo-slow", stream=True, metadata={"team": "docs"},
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}],
        extra_headers={"x-request-id": STREAM_ID})
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    gc = genai.Client(api_key="anything", http_options={"base_url": url})
    interaction = gc.interactions.create(model="anthropic/demo", input="hi",
                                         extra_headers={"x-request-id": "interactions-to-anthropic"})
    assert interaction.status == "completed", interaction.status
    answer = oa.chat.completions.create(model="interactions/demo", messages=[{"role": "user", "content": "hi"}],
                                        extra_headers={"x-request-id": "chat-to-interactions"})
    assert answer.choices[0].message.content
    an = anthropic.Anthropic(base_url=url, api_key="anything")
    an.messages.create(model="responses/demo", max_tokens=100, messages=[{"role": "user", "content": "hi"}],
                       extra_headers={"x-request-id": "anthropic-to-responses"})
    gc.models.generate_content(model="chat/demo", contents="hi",
                               config={"http_options": {"headers": {"x-request-id": "gemini-to-chat"}}})


def screenshot(url: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("no chromium browser on PATH (on Debian: apt-get install -y chromium)")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport=VIEWPORT, device_scale_factor=1)
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(url + "/_proxai/")
        page.wait_for_selector("#live.on")
        row = page.locator(f'tr.req-row[data-request-id="{STREAM_ID}"]')
        row.locator(".outcome", has_text="complete").wait_for(timeout=10_000)
        row.click()
        page.locator('.phase[data-phase="provider_request"] .json').wait_for()
        page.locator('.phase[data-phase="outbound_response"] .ev-n').first.wait_for()
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(out / "inspector.png"))
        page.click("#subtab-timeline")
        page.locator('#stream-end[data-reason="complete"]').wait_for()
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(out / "inspector-timeline.png"))
        browser.close()
    if errors:
        raise SystemExit(f"script errors on the page: {errors}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs", help="where the PNG files go (default: docs/)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as home:
        proc, url = start_demo_server(home)
        try:
            send_requests(url)
            screenshot(url, args.out)
        finally:
            proc.terminate()
            proc.wait(10)
    print(f"wrote {args.out / 'inspector.png'} and {args.out / 'inspector-timeline.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
