"""bench.breakdown: each profiler sample goes to the component that owns it, the stack's work
(aiohttp, the event loop) apart from the proxy's; and, where py-spy is installed, a tiny run
gives every target a cost per request that adds up to its measured CPU."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bench import breakdown

ROOT = Path(__file__).resolve().parent.parent
SITE = "/opt/venv/lib/python3.11/site-packages"
REPO = "/src/checkout"

MIDDLEWARE = [f"_run ({REPO}/proxai/tools/cli.py:185)", "Runner.run (/usr/lib/python3.11/asyncio/runners.py:86)",
              f"_handle ({SITE}/aiohttp/web_app.py:521)", f"_middleware ({REPO}/proxai/http/app.py:618)"]
SERVE = MIDDLEWARE + [f"Proxy.handle ({REPO}/proxai/http/app.py:165)", f"Proxy._proxy ({REPO}/proxai/http/app.py:232)"]


def _frames(*stack: str) -> list[str]:
    return [breakdown._short(f) for f in stack]


@pytest.mark.parametrize("stack, component", [
    # the event loop's C work: no Python frame below the loop
    (["_run (x/proxai/tools/cli.py:185)", "Runner.run (/usr/lib/python3.11/asyncio/runners.py:86)"], "event loop (C)"),
    # aiohttp's work is the stack's, whichever of the proxy's frames called it
    (SERVE + [f"Transport._post ({REPO}/proxai/http/transport.py:204)", f"ClientSession._request ({SITE}/aiohttp/client.py:558)",
              f"ClientRequest.send ({SITE}/aiohttp/client_reqrep.py:1643)"], "aiohttp client"),
    (SERVE + [f"read ({REPO}/proxai/http/ingress.py:143)", f"BaseRequest.read ({SITE}/aiohttp/web_request.py:700)"],
     "aiohttp server"),
    (MIDDLEWARE[:3] + [f"RequestHandler.start ({SITE}/aiohttp/web_protocol.py:610)"], "aiohttp server"),
    # the innermost component wins: the log line written from the middleware is the log line's
    (MIDDLEWARE + [f"log_request ({REPO}/proxai/observability/logs.py:214)",
                   "LogRecord.__init__ (/usr/lib/python3.11/logging/__init__.py:292)"], "request log line"),
    (SERVE + [f"parse ({REPO}/proxai/http/ingress.py:180)", f"decode ({REPO}/proxai/http/ingress.py:188)"],
     "request body: read and checks"),
    # rules-engine frames are their caller's: a template run by a codec is the translation's,
    # one run by the summary rules the summary's
    (SERVE + [f"Engine.translate_request ({REPO}/engine/__init__.py:160)", f"Codec.apply ({REPO}/engine/codec.py:40)",
              "t1 (<template rules/anthropic_messages/request.encode.yaml:2 t1>:1)",
              f"fit_tools ({REPO}/engine/hooks/fit.py:57)"], "translation: request and response"),
    (SERVE + [f"Engine.summary ({REPO}/engine/__init__.py:86)", f"_scope ({REPO}/engine/protocol.py:150)",
              f"Context.vars ({REPO}/engine/context.py:70)"], "usage and stop (summary rules)"),
    (SERVE + [f"StreamLoop._take ({REPO}/proxai/http/streaming.py:301)", f"Relay.feed ({REPO}/proxai/http/relay.py:85)",
              f"Chunks.split ({REPO}/engine/hooks/chat_stream.py:34)"], "stream: rules (translation, or the pass-through watch)"),
    (SERVE + [f"StreamLoop._take ({REPO}/proxai/http/streaming.py:301)", f"SSEParser.feed_raw ({REPO}/proxai/http/sse.py:55)"],
     "stream: SSE parse"),
    # the proxy's own frame that names no component
    (SERVE, "the relay's own code, other"),
    (SERVE + [f"Descriptor.section ({REPO}/engine/protocol.py:40)"], "the relay's own code, other"),
    ([f"main ({REPO}/bench/floor.py:50)", "Runner.run (/usr/lib/python3.11/asyncio/runners.py:86)",
      f"serve.<locals>.relay ({REPO}/bench/floor.py:25)"], "the relay's own code, other"),
    (SERVE + ["t9 (<template rules/openai_chat_completions/protocol.yaml:9 t9>:1)"], "rules engine, other"),
])
def test_a_sample_goes_to_the_component_that_owns_it(stack, component):
    assert breakdown.classify(_frames(*stack)) == component


def test_a_profile_is_counted_sample_by_sample(tmp_path):
    raw = tmp_path / "profile.txt"
    log = ";".join(MIDDLEWARE + [f"log_request ({REPO}/proxai/observability/logs.py:214)"])
    loop = ";".join(MIDDLEWARE[:2])
    raw.write_text(f"{log} 3\n{loop} 5\n\nnot a sample line\n")
    counts, total = breakdown.shares(raw)
    assert total == 8
    assert counts == {"request log line": 3, "event loop (C)": 5}


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.skipif(shutil.which("py-spy") is None and not (Path(sys.executable).parent / "py-spy").exists(),
                    reason="py-spy is not installed (pip install py-spy)")
def test_a_tiny_run_costs_every_target_in_components_that_add_up_to_its_cpu(tmp_path):
    out = tmp_path / "breakdown.json"
    done = subprocess.run([sys.executable, "-m", "bench.breakdown", "--pairs", "chat->chat,chat->anthropic",
                           "--modes", "json", "--requests", "300", "--no-pin", "--json", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=230)
    if done.returncode != 0 and ("ptrace" in done.stderr.lower() or "permission" in done.stderr.lower()):
        pytest.skip("py-spy may not attach to another process here (ptrace permission)")
    assert done.returncode == 0, done.stderr[-3000:]
    saved = json.loads(out.read_text())
    assert set(saved["cases"]) == {"chat->chat (json, c=1)", "chat->anthropic (json, c=1)"}
    for case in saved["cases"].values():
        for kind in ("proxy", "floor"):
            target = case[kind]
            assert target["errors"] == 0 and target["samples"] > 0
            assert sum(target["components"].values()) == pytest.approx(target["cpu_ms_per_request"] * 1000)
        # the floor is only the stack; the proxy's own work shows as its own
        assert set(case["floor"]["components"]) <= {"event loop (C)", "aiohttp server", "aiohttp client",
                                                     "the relay's own code, other"}
        assert case["proxy"]["components"].get("request body: read and checks", 0) > 0
    assert saved["cases"]["chat->anthropic (json, c=1)"]["proxy"]["components"]["translation: request and response"] > 0
    assert "### chat->anthropic (json, c=1)" in done.stdout
