"""`proxai capture show`: the captured phases of one request, laid out for reading.

Two layouts:

* `stacked`: the four phases one after another, each under a header line;
* `side`: two rows of two columns, each row one translation step:
  inbound_request | provider_request, then upstream_response | outbound_response.

Bodies that are JSON are pretty-printed; SSE streams are shown one numbered
event per entry (`#3 content_block_delta {...}`), so the same step of a
translated stream can be found on both sides. Side by side, events are lined up
by position only: one upstream event may become zero, one or several client
events. `auto` picks `side` when the terminal is at least 140 columns wide.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from typing import Iterable

from proxai.observability.capture import PHASES, Captured
from proxai.http.sse import SSEParser

SIDE_MIN_WIDTH = 140
_ROWS = (("inbound_request", "provider_request"), ("upstream_response", "outbound_response"))


def terminal_width() -> int:
    return shutil.get_terminal_size((100, 24)).columns


def render(request_id: str, phases: dict[str, Captured], layout: str = "auto", width: int | None = None) -> str:
    width = width or terminal_width()
    if layout == "auto":
        layout = "side" if width >= SIDE_MIN_WIDTH else "stacked"
    out = [f"request {request_id}: {', '.join(p for p in PHASES if p in phases) or 'nothing captured'}"]
    if layout == "side":
        out.extend(_side(phases, width))
    else:
        for phase in PHASES:
            if phase in phases:
                out.append("")
                out.append(_title(phase, width))
                out.extend(_lines(phases[phase]))
    return "\n".join(out) + "\n"


def _title(phase: str, width: int) -> str:
    label = f"== {phase} "
    return label + "=" * max(0, width - len(label))


def _lines(cap: Captured) -> list[str]:
    head, body = _parts(cap)
    return head + [""] + body


def _parts(cap: Captured) -> tuple[list[str], list[str]]:
    head = [cap.start_line] + [f"{name}: {value}" for name, value in cap.headers]
    body = _events(cap.body) if cap.is_stream else _body(cap.body).splitlines()
    return head, body


def _body(body: bytes) -> str:
    if not body:
        return "(empty body)"
    try:
        return json.dumps(json.loads(body), indent=2, ensure_ascii=False)
    except (ValueError, UnicodeDecodeError):
        return body.decode("utf-8", "replace")


def _events(body: bytes) -> list[str]:
    parser = SSEParser()
    lines: list[str] = []
    for n, event in enumerate(parser.feed(body), 1):
        data = event.data
        try:
            data = json.dumps(json.loads(data), ensure_ascii=False, separators=(",", ":"))
        except ValueError:
            pass
        name = f" {event.event}" if event.event else ""
        lines.append(f"#{n}{name} {data}")
    rest = parser.close()
    if rest.strip():
        lines.append(f"(unterminated at end of stream) {rest.decode('utf-8', 'replace')}")
    return lines or ["(no events)"]


def _side(phases: dict[str, Captured], width: int) -> Iterable[str]:
    col = (width - 3) // 2
    for left, right in _ROWS:
        if left not in phases and right not in phases:
            continue
        yield ""
        yield _cell(f"== {left} ", col, "=") + " | " + _cell(f"== {right} ", col, "=")
        # Heads padded to the same height, so both bodies (and streams' event #1) start on one line.
        ha, ba = _parts(phases[left]) if left in phases else (["(not captured)"], [])
        hb, bb = _parts(phases[right]) if right in phases else (["(not captured)"], [])
        height = max(len(ha), len(hb))
        a = ha + [""] * (height - len(ha)) + [""] + ba
        b = hb + [""] * (height - len(hb)) + [""] + bb
        for i in range(max(len(a), len(b))):
            wa = _wrap(a[i], col) if i < len(a) else [""]
            wb = _wrap(b[i], col) if i < len(b) else [""]
            for j in range(max(len(wa), len(wb))):
                yield (_cell(wa[j] if j < len(wa) else "", col) + " | " + (wb[j] if j < len(wb) else "")).rstrip()


def _wrap(line: str, width: int) -> list[str]:
    if len(line) <= width:
        return [line]
    indent = len(line) - len(line.lstrip(" "))
    return textwrap.wrap(line, width, subsequent_indent=" " * min(indent + 2, width // 2),
                         break_long_words=True, break_on_hyphens=False, drop_whitespace=False) or [""]


def _cell(text: str, width: int, fill: str = " ") -> str:
    return text[:width] + fill * max(0, width - len(text))
