"""Capture: the exact bytes of each phase of a request, one file per request and phase.

Phases (off unless enabled in `capture:` or with `--capture`):

    inbound_request    the client's request as received
    provider_request   the request sent to the provider
    upstream_response  the provider's response as received (SSE streams byte for byte)
    outbound_response  the response sent to the client (SSE streams byte for byte)

Each file is an HTTP message: a start line, the headers (credentials replaced by
`[redacted]`), an empty line, then the body bytes exactly. Streams are appended
chunk by chunk as they pass, never held whole in memory.

Files live in `$PROXAI_HOME/captures/` (default `~/.proxai/captures/`), named
`<request id>.<phase>.http`; nothing else goes into a file name. A client that
reuses a request id overwrites that id's earlier capture. When capture is off,
the app creates none of these objects: no file, no copy, no wrapper.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, BinaryIO, Iterable, Mapping

from proxai.routing.config import CAPTURE_PHASES

PHASES = CAPTURE_PHASES
SUFFIX = ".http"
SUMMARY_SUFFIX = ".summary.json"
SUMMARY_FIELDS = ("method", "path", "model", "status", "duration_ms", "client_protocol", "provider_protocol", "outcome",
                  "route", "provider", "key", "attempts", "client")  # which deployment and key (fingerprint) served, for whom
REDACTED = "[redacted]"

# Header names whose values are credentials, plus any name containing one of the
# fragments below (provider-specific key headers, cookies, session tokens).
_SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "x-api-key", "api-key", "cookie", "set-cookie"})
_SECRET_FRAGMENTS = ("key", "token", "secret", "auth", "cookie", "session", "password")


def home() -> Path:
    """ProxAI's local directory: $PROXAI_HOME, else ~/.proxai."""
    env = os.environ.get("PROXAI_HOME")
    return Path(env).expanduser() if env else Path.home() / ".proxai"


def directory() -> Path:
    return home() / "captures"


def parse_phases(text: str) -> dict[str, bool]:
    """`all`, `none` or a comma list of phase names -> {phase: on}; ValueError on an unknown name."""
    names = [part.strip() for part in text.split(",") if part.strip()]
    if names == ["all"]:
        return dict.fromkeys(PHASES, True)
    if names in ([], ["none"]):
        return dict.fromkeys(PHASES, False)
    unknown = [n for n in names if n not in PHASES]
    if unknown:
        raise ValueError(f"unknown capture phase {unknown[0]!r}; use all, none or a comma list of: {', '.join(PHASES)}")
    return {phase: phase in names for phase in PHASES}


def is_secret_header(name: str) -> bool:
    lower = name.lower()
    return lower in _SECRET_HEADERS or any(f in lower for f in _SECRET_FRAGMENTS)


def redact_target(start_line: str) -> str:
    """A key in the request target's query (Gemini's `?key=`) is a secret like a key header."""
    method, sep, rest = start_line.partition(" ")
    target, sep2, version = rest.partition(" ")
    path, q, query = target.partition("?")
    if not q or method.startswith("HTTP/"):
        return start_line
    pairs = [pair.partition("=") for pair in query.split("&")]
    query = "&".join(f"{k}{eq}{REDACTED if is_secret_header(k) else v}" for k, eq, v in pairs)
    return f"{method}{sep}{path}?{query}{sep2}{version}"


def head(start_line: str, headers: Iterable[tuple[str, str]]) -> bytes:
    lines = [redact_target(start_line)]
    for name, value in headers:
        lines.append(f"{name}: {REDACTED if is_secret_header(name) else value}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "replace")


def file_path(root: Path, request_id: str, phase: str) -> Path:
    from proxai.http.requestid import is_safe

    if not is_safe(request_id):  # `../x` must not name a file outside the capture folder
        raise ValueError(f"not a request id: {request_id!r}")
    return root / f"{request_id}.{phase}{SUFFIX}"


class Recorder:
    """The app's capture settings; `open()` one RequestCapture per request."""

    def __init__(self, phases: Iterable[str], root: Path | None = None):
        self.phases = frozenset(phases)
        self.root = root or directory()

    def open(self, request_id: str) -> "RequestCapture":
        return RequestCapture(self.root, request_id, self.phases)


class RequestCapture:
    def __init__(self, root: Path, request_id: str, phases: frozenset[str]):
        self.root = root
        self.request_id = request_id
        self.phases = phases
        self._files: dict[str, BinaryIO] = {}
        self._ready = False

    def wants(self, phase: str) -> bool:
        return phase in self.phases

    def start(self, phase: str, start_line: str, headers: Iterable[tuple[str, str]]) -> None:
        """Begin a phase's file with its start line and redacted headers."""
        if phase not in self.phases:
            return
        if not self._ready:
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._ready = True
        old = self._files.pop(phase, None)
        if old is not None:
            old.close()
        path = file_path(self.root, self.request_id, phase)
        # Captures hold prompts: readable by the owner only.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        f = os.fdopen(fd, "wb")
        f.write(head(start_line, headers))
        self._files[phase] = f

    def write(self, phase: str, data: bytes) -> None:
        f = self._files.get(phase)
        if f is not None and data:
            f.write(data)
            f.flush()  # a stalled stream's capture shows everything up to the stall

    def whole(self, phase: str, start_line: str, headers: Iterable[tuple[str, str]], body: bytes) -> None:
        if phase in self.phases:
            self.start(phase, start_line, headers)
            self.write(phase, body)
            self.end(phase)

    def end(self, phase: str) -> None:
        f = self._files.pop(phase, None)
        if f is not None:
            f.close()

    def close(self) -> None:
        for phase in list(self._files):
            self.end(phase)

    def summary(self, fields: Mapping[str, Any]) -> None:
        """What `capture list` shows: method, path, model, status, duration (no bodies, no headers)."""
        if not self._ready:
            return
        doc = {k: fields.get(k) for k in SUMMARY_FIELDS if fields.get(k) is not None}
        path = self.root / f"{self.request_id}{SUMMARY_SUFFIX}"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f)


def status_line(status: int, reason: str | None) -> str:
    return f"HTTP/1.1 {status} {reason or ''}".rstrip()


def header_items(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    return list(headers.items())


# --- wrappers used only when a response phase is captured --------------------------------


class _TeeContent:
    def __init__(self, inner: Any, cap: RequestCapture, phase: str):
        self._inner = inner
        self._cap = cap
        self._phase = phase

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def readany(self) -> bytes:
        data = await self._inner.readany()
        self._cap.write(self._phase, data)
        return data

    def read_nowait(self, n: int = -1) -> bytes:
        data = self._inner.read_nowait(n)
        self._cap.write(self._phase, data)
        return data

    async def read(self, n: int = -1) -> bytes:
        data = await self._inner.read(n)
        self._cap.write(self._phase, data)
        return data

    async def readchunk(self) -> tuple[bytes, bool]:
        data, end = await self._inner.readchunk()
        self._cap.write(self._phase, data)
        return data, end


class TeeUpstream:
    """An upstream aiohttp response whose body reads are also written to the capture."""

    def __init__(self, inner: Any, cap: RequestCapture, phase: str = "upstream_response"):
        self._inner = inner
        self._cap = cap
        self._phase = phase
        self.content = _TeeContent(inner.content, cap, phase)

    def __getattr__(self, name: str) -> Any:  # status, headers, close, release, ...
        return getattr(self._inner, name)

    async def read(self) -> bytes:
        data = await self._inner.read()
        self._cap.write(self._phase, data)
        return data


class TeeClient:
    """The client's stream response; every blob written is also appended to the capture."""

    def __init__(self, inner: Any, cap: RequestCapture, phase: str = "outbound_response"):
        self._inner = inner
        self._cap = cap
        self._phase = phase

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def write(self, data: bytes) -> None:
        await self._inner.write(data)
        self._cap.write(self._phase, data)


# --- reading captures back -----------------------------------------------------------------


class Captured:
    """One phase file split into start line, headers and body."""

    def __init__(self, phase: str, raw: bytes):
        self.phase = phase
        head_bytes, sep, body = raw.partition(b"\r\n\r\n")
        lines = head_bytes.decode("utf-8", "replace").split("\r\n")
        self.start_line = lines[0] if lines else ""
        self.headers = [tuple(line.split(": ", 1)) if ": " in line else (line, "") for line in lines[1:]]
        self.body = body if sep else b""

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None

    @property
    def is_stream(self) -> bool:
        return (self.header("content-type") or "").lower().startswith("text/event-stream")


def load(request_id: str, root: Path | None = None) -> dict[str, Captured]:
    root = root or directory()
    out: dict[str, Captured] = {}
    for phase in PHASES:
        path = file_path(root, request_id, phase)
        if path.is_file():
            out[phase] = Captured(phase, path.read_bytes())
    return out


def list_requests(root: Path | None = None) -> list[tuple[str, float, list[str]]]:
    """(request id, newest mtime, phases present) for every captured request, newest first."""
    root = root or directory()
    found: dict[str, tuple[float, list[str]]] = {}
    if not root.is_dir():
        return []
    for path in root.iterdir():
        name = path.name
        if not name.endswith(SUFFIX):
            continue
        stem = name[: -len(SUFFIX)]
        rid, _, phase = stem.rpartition(".")
        if phase not in PHASES or not rid:
            continue
        mtime = path.stat().st_mtime
        seen = found.setdefault(rid, (mtime, []))
        found[rid] = (max(seen[0], mtime), seen[1] + [phase])
    rows = [(rid, mtime, sorted(phases, key=PHASES.index)) for rid, (mtime, phases) in found.items()]
    rows.sort(key=lambda r: r[1], reverse=True)
    return rows


def read_summary(request_id: str, root: Path | None = None) -> dict[str, Any]:
    """A request's summary; for captures without one, what the inbound start line tells."""
    root = root or directory()
    try:
        doc = json.loads((root / f"{request_id}{SUMMARY_SUFFIX}").read_text(encoding="utf-8"))
        if isinstance(doc, dict):
            return doc
    except (OSError, ValueError):
        pass
    inbound = file_path(root, request_id, "inbound_request")
    try:
        with inbound.open("rb") as f:
            method, _, rest = f.readline().decode("utf-8", "replace").partition(" ")
        return {"method": method, "path": rest.rsplit(" ", 1)[0]}
    except OSError:
        return {}
