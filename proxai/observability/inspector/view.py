"""The inspector's JSON: request summaries for the list, and one request in full.

Everything here reads capture-format phases (`capture.Captured`), whether they
were kept in memory or read from `$PROXAI_HOME/captures/`, so headers carry the
captures' redaction. Request targets are redacted too (a key in a query string
or in a URL's user part).
"""

from __future__ import annotations

import functools
import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson

import engine
from proxai.observability import capture
from proxai.observability.logs import usage_fields
from proxai.http.errors import builtin_engine
from proxai.http.paths import canonical
from proxai.observability.inspector.record import ON_DISK, Entry
from proxai.http.sse import SSEParser
from proxai.http.streaming import Outcome

_SUMMARY_KEYS = ("request_id", "method", "path", "client_protocol", "route", "provider", "provider_protocol",
                 "model", "upstream_model", "stream", "outcome", "ttfb_ms", "duration_ms", "input_tokens",
                 "output_tokens", "error", "translation_error", "upstream_request_id", "client")


# --- summaries ---------------------------------------------------------------------------


def summary(entry: Entry) -> dict[str, Any]:
    info = entry.info
    out: dict[str, Any] = {k: info.get(k) for k in _SUMMARY_KEYS}
    out.update(key=str(entry.key), source="memory", time=entry.started, in_flight=not entry.done,
               status=info.get("status") if entry.done else None)
    out["mode"] = _mode(out.get("client_protocol"), out.get("provider_protocol"))
    if "outcome" in info:
        out["outcome"] = outcome(entry)
    return out


def _mode(client: str | None, provider: str | None) -> str | None:
    if not client or not provider:
        return None
    return "pass-through" if client == provider else "translated"


def outcome(entry: Entry) -> str:
    """The log's outcome; `open` until the request is done (while a stream runs, the
    request's outcome already says client_disconnected, in case the client is the one to end it)."""
    if not entry.done:
        return Outcome.OPEN.value
    return entry.info.get("outcome") or Outcome.OPEN.value


def disk_summary(request_id: str, mtime: float, phases: dict[str, capture.Captured], eng: engine.Engine | None = None) -> dict[str, Any]:
    """What the phase files alone say about a request captured to disk."""
    out: dict[str, Any] = {k: None for k in _SUMMARY_KEYS}
    out.update(key="disk:" + request_id, source="disk", request_id=request_id, time=mtime, in_flight=False, status=None)
    inbound = phases.get("inbound_request")
    if inbound is not None:
        method, _, rest = inbound.start_line.partition(" ")
        path = urlsplit(rest.rpartition(" ")[0] or rest).path
        out.update(method=method, path=path, client_protocol=protocol_of(path, eng))
        body = _json(inbound.body)
        if isinstance(body, dict):
            out["model"] = body.get("model") if isinstance(body.get("model"), str) else None
            out["stream"] = bool(body.get("stream"))
    provider = phases.get("provider_request")
    if provider is not None:
        out["provider_protocol"] = protocol_of(
            urlsplit(provider.start_line.split(" ")[1] if " " in provider.start_line else "").path, eng)
        body = _json(provider.body)
        if isinstance(body, dict) and isinstance(body.get("model"), str):
            out["upstream_model"] = body["model"]
    outbound = phases.get("outbound_response")
    if outbound is not None:
        parts = outbound.start_line.split(" ")
        if len(parts) > 1 and parts[1].isdigit():
            out["status"] = int(parts[1])
    upstream = phases.get("upstream_response")
    if upstream is not None and not upstream.is_stream and out["provider_protocol"]:
        # The counts the log line had: the provider protocol's summary rules.
        out.update(usage_fields((eng or builtin_engine()).summary(out["provider_protocol"], upstream.body).get("usage")))
    out["mode"] = _mode(out.get("client_protocol"), out.get("provider_protocol"))
    return out


def protocol_of(path: str, eng: engine.Engine | None = None) -> str | None:
    """The protocol a captured client or provider path speaks, by the descriptors' client
    endpoints and upstream paths (a provider's path ends with its upstream path below the
    base URL); None for a path no protocol serves."""
    wire = (eng or builtin_engine()).wire
    for pattern, protocol in _path_patterns(wire):
        if pattern.search(path) or pattern.search(canonical(path)):
            return protocol
    return None


@functools.lru_cache(maxsize=8)
def _path_patterns(wire) -> tuple[tuple[re.Pattern, str], ...]:
    """(pattern, protocol) for every path template of every operation of every protocol,
    matching at the end of a path, the longest template first; `{model}` and any other
    placeholder stand for one or more characters."""
    found: dict[str, str] = {}
    for protocol in wire.names:
        descriptor = wire.descriptors[protocol]
        endpoints, upstream = descriptor.section("endpoints"), descriptor.section("upstream")
        roots = endpoints.get("also_under") or ()
        for section in (endpoints, upstream):
            for op in section.values():
                if not isinstance(op, dict):
                    continue
                for template in (op.get("path"), op.get("stream_path"), (op.get("stream") or {}).get("path")
                                 if isinstance(op.get("stream"), dict) else None):
                    if not isinstance(template, str) or not template.startswith("/"):
                        continue
                    found.setdefault(template, protocol)
                    if section is endpoints:
                        for root in roots:  # /v1beta/models/... also served under /v1/models/...
                            parts = template.split("/", 2)
                            if len(parts) == 3:
                                found.setdefault(root + "/" + parts[2], protocol)
    patterns = []
    for template in sorted(found, key=len, reverse=True):
        regex = "".join(".+" if re.fullmatch(r"\{\w+\}", part) else re.escape(part)
                        for part in re.split(r"(\{\w+\})", template))
        patterns.append((re.compile(regex + "$"), found[template]))
    return tuple(patterns)


# --- one request ------------------------------------------------------------------------


def entry_phases(entry: Entry) -> dict[str, capture.Captured]:
    out: dict[str, capture.Captured] = {}
    from_disk = None
    for phase, held in entry.phases.items():
        if held is ON_DISK:
            if from_disk is None:
                from_disk = capture.load(entry.request_id, entry.disk_root)
            if phase in from_disk:
                out[phase] = from_disk[phase]
        else:
            out[phase] = capture.Captured(phase, bytes(held))
    return out


def detail(entry: Entry) -> dict[str, Any]:
    info = entry.info
    phases = entry_phases(entry)
    out = {
        "summary": summary(entry),
        "phases": {p: phase_view(c, p in entry.truncated) for p, c in phases.items()},
        "traces": list(info.get("_traces") or ()),
        "error": _error(info, phases, entry),
        "timeline": timeline(entry) if info.get("stream") and (entry.upstream or entry.outputs) else None,
    }
    return out


def disk_detail(request_id: str, phases: dict[str, capture.Captured], mtime: float, eng: engine.Engine) -> dict[str, Any]:
    summ = disk_summary(request_id, mtime, phases, eng)
    out = {
        "summary": summ,
        "phases": {p: phase_view(c, False) for p, c in phases.items()},
        "traces": [],
        "error": None,
        "timeline": None,
    }
    upstream, outbound = phases.get("upstream_response"), phases.get("outbound_response")
    if upstream is not None and upstream.is_stream:
        out["timeline"] = replayed_timeline(summ, phases, eng)
    if summ.get("status") and summ["status"] >= 400 and outbound is not None:
        out["error"] = {"kind": None, "message": error_message(_json(outbound.body)), "rule": None}
    return out


def phase_view(cap: capture.Captured, truncated: bool) -> dict[str, Any]:
    view: dict[str, Any] = {
        "start_line": redact_start_line(cap.start_line),
        "headers": [[k, capture.REDACTED if capture.is_secret_header(k) else v] for k, v in cap.headers],
        "stream": cap.is_stream,
        "truncated": truncated,
        "size": len(cap.body),
    }
    if cap.is_stream:
        view["events"] = [_event_view(n, ev.event, ev.data) for n, ev in enumerate(_events(cap.body), 1)]
    else:
        body = _json(cap.body)
        if body is not None:
            view["json"] = body
        else:
            view["text"] = cap.body.decode("utf-8", "replace")
    return view


def timeline(entry: Entry) -> dict[str, Any]:
    rows = [{"n": n, "t_ms": t, **_event_view(n, name, data), "client": []}
            for n, (t, name, data) in enumerate(entry.upstream, 1)]
    tail: list = []
    count = 0
    for source, t, blob in entry.outputs:
        target = rows[source - 1]["client"] if source is not None and 0 < source <= len(rows) else tail
        if blob is None:  # pass-through: the upstream event went out as it came
            row = rows[source - 1]
            count += 1
            target.append({"n": count, "t_ms": t, "event": row["event"], "data": row["data"], "relayed": True})
            continue
        for ev in _events(blob):
            count += 1
            target.append({"t_ms": t, **_event_view(count, ev.event, ev.data)})
    return {
        "rows": rows,
        "tail": tail,
        "end": _end(entry, rows, tail),
        "truncated": entry.timeline_truncated,
        "linked": True,
    }


def _end(entry: Entry, rows: list, tail: list) -> dict[str, Any]:
    info = entry.info
    last_client = (tail or [c for r in rows for c in r["client"]] or [None])[-1]
    message = error_message(last_client["data"]) if last_client and isinstance(last_client.get("data"), dict) else None
    return {
        "outcome": outcome(entry),
        "after_event": len(rows),
        "at_ms": info.get("duration_ms"),
        "message": message,
    }


def replayed_timeline(summ: dict, phases: dict[str, capture.Captured], eng: engine.Engine) -> dict[str, Any]:
    """A captured stream's timeline. The links are not on disk: the captured upstream events
    are run through the rules again to learn how many client events each produced, and the
    captured client events are assigned in that order. Pass-through streams map one to one."""
    upstream = phases["upstream_response"]
    outbound = phases.get("outbound_response")
    events = _events(upstream.body)
    rows = [{"n": n, "t_ms": None, **_event_view(n, ev.event, ev.data), "client": []} for n, ev in enumerate(events, 1)]
    client_events = _events(outbound.body) if outbound is not None and outbound.is_stream else []
    client, provider = summ.get("client_protocol"), summ.get("provider_protocol")
    sources: list[int | None] | None = None
    complete = None
    if client and provider and client == provider:
        sources = list(range(1, len(client_events) + 1))
    elif client and provider:
        inbound = phases.get("inbound_request")
        body = _json(inbound.body) if inbound is not None else None
        ctx = engine.Context(client_protocol=client, provider_protocol=provider,
                             client_body=body if isinstance(body, dict) else None)
        try:
            translator = eng.open_stream(ctx)
            links = translator.inspect()
            for ev in events:
                translator.feed(ev)
            if not translator.done:
                translator.eof()
            complete = translator.complete
            sources = [origin for origin, blob in links for _ in _events(blob)]
        except engine.TranslationError:
            sources = None
    linked = sources is not None and len(sources) == len(client_events)
    tail: list = []
    for i, ev in enumerate(client_events):
        view = {"t_ms": None, **_event_view(i + 1, ev.event, ev.data)}
        source = sources[i] if linked and sources is not None else None
        (rows[source - 1]["client"] if source and source <= len(rows) else tail).append(view)
    # The files alone say less than the log: complete, ended early (eof), or unknown (None).
    ended = None if complete is None else (Outcome.COMPLETE if complete else Outcome.EOF).value
    last = client_events[-1] if client_events else None
    message = error_message(_json(last.data.encode())) if last is not None else None
    if message:
        ended = None  # an error event ended it: the provider's or the proxy's, the files do not say
    return {"rows": rows, "tail": tail, "truncated": False, "linked": linked,
            "end": {"outcome": ended, "after_event": len(rows), "at_ms": None, "message": message, "replayed": True}}


def _error(info: dict, phases: dict[str, capture.Captured], entry: Entry) -> dict[str, Any] | None:
    kind = info.get("error")
    translation = info.get("translation_error")
    if not kind and not translation and (info.get("status") or 0) < 400:
        return None
    rule = info.get("rule") or getattr(entry.observer, "error_rule", None)
    message = param = None
    outbound = phases.get("outbound_response")
    if outbound is not None and not outbound.is_stream:
        body = _json(outbound.body)
        message = error_message(body)
        err = body.get("error") if isinstance(body, dict) else None
        param = err.get("param") if isinstance(err, dict) else None
    return {"kind": kind, "translation": translation, "rule": rule, "message": message, "param": param}


def error_message(body: Any) -> str | None:
    """The message of an error body or event: `error.message` (every protocol's HTTP error
    body; Chat's, Anthropic's and Interactions' stream errors), a Responses `error` event's
    `message`, a failed Response's `response.error.message`."""
    if not isinstance(body, dict):
        return None
    err = body.get("error")
    if isinstance(err, dict) and isinstance(err.get("message"), str):
        return err["message"]
    response = body.get("response")
    if body.get("type") == "error" and isinstance(body.get("message"), str):
        return body["message"]
    if isinstance(response, dict) and isinstance(response.get("error"), dict):
        return response["error"].get("message")
    return None


# --- helpers ---------------------------------------------------------------------------


def _events(body: bytes) -> list:
    parser = SSEParser()
    return parser.feed(body + (b"" if body.endswith(b"\n\n") else b"\n\n")) if body else []


def _event_view(n: int, name: str | None, data: str) -> dict[str, Any]:
    parsed: Any = data
    if data != "[DONE]":
        try:
            parsed = orjson.loads(data)
        except orjson.JSONDecodeError:
            pass
    if name is None and isinstance(parsed, dict) and isinstance(parsed.get("type"), str):
        label = parsed["type"]
    else:
        label = name
    return {"n": n, "event": label, "data": parsed}


def _json(body: bytes) -> Any:
    if not body:
        return None
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None


def redact_start_line(line: str) -> str:
    """`POST https://user:key@host/v1/x?api-key=... HTTP/1.1` with the credentials replaced."""
    parts = line.split(" ")
    if len(parts) < 2 or parts[0].startswith("HTTP/"):
        return line
    target = urlsplit(parts[1])
    netloc = target.netloc
    if "@" in netloc:
        netloc = capture.REDACTED + "@" + netloc.rpartition("@")[2]
    query = target.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, capture.REDACTED if capture.is_secret_header(k) else v) for k, v in pairs])
    parts[1] = urlunsplit((target.scheme, netloc, target.path, query, target.fragment))
    return " ".join(parts)
