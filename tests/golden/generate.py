"""Golden files of the codecs' wire output: what every codec fixture and every recorded
stream becomes on the wire, toward every protocol.

Inputs
  * the payloads the engine-level codec tests feed the engine (tests/test_codec_*.py and
    the other engine tests in CAPTURE_TESTS), captured by running those tests with a
    recorder around the engine's entry points and stored in ``cases.jsonl``:
    ``request`` (a client request), ``ir_request`` (an IR request given to a request
    encoder), ``response`` (a provider response), ``ir_response``, ``stream`` (provider
    SSE events, with eof/fail steps) and ``ir_stream`` (IR events given to a stream encoder);
  * the request bodies recorded from real coding-agent CLIs (tests/fixtures/clients/), each
    with the context defaults and once more with prompt caching on (the servers' default);
  * every item of the recorded corpus (tests/corpus/<source>/<protocol>/<kind>/<name>).

Outputs, per input and per target protocol (the three providers for a request, the three
clients for a response or stream, so all nine client/provider pairs):
  * ``codec.jsonl``: one line per (case, target) for the captured cases and client fixtures;
  * ``corpus.jsonl.gz``: the same for the corpus (gzip, fixed header, so the bytes are stable).
Each line is ``{"case", "to", "wire"}`` with the exact JSON text the encoder produced (key
order kept) or the SSE bytes of the whole translated stream, or ``{"case", "to", "error"}``
with the rejection's status, message and param (the rule location is left out: it moves
with every edit of a rule file).

Determinism: while translating, ``time.time``/``time.time_ns`` return a fixed instant and
``uuid.uuid4`` returns UUIDs counted from 1, restarted for every (case, target), so
minted ids and ``created`` stamps are the same on every run; nothing else is normalised.

    python tests/golden/generate.py            # rewrite codec.jsonl and corpus.jsonl.gz
    python tests/golden/generate.py --capture  # re-capture cases.jsonl from the tests first

Re-capture only when the codec tests gained fixtures; regenerate only when a change of
wire output is intended (and review the diff). tests/test_golden.py compares.
"""
from __future__ import annotations

import base64
import contextlib
import copy
import dataclasses
import gzip
import hashlib
import io
import json
import sys
import time
import uuid
from pathlib import Path
from unittest import mock

HERE = Path(__file__).resolve().parent
TESTS = HERE.parent
ROOT = TESTS.parent
for p in (str(ROOT), str(TESTS)):
    if p not in sys.path:
        sys.path.insert(0, p)

import orjson  # noqa: E402

import engine  # noqa: E402
from engine.stream import StreamRun, StreamTranslator  # noqa: E402
from proxai.http.sse import SSEEvent, SSEParser  # noqa: E402

PROTOCOLS = ("openai_chat_completions", "openai_responses", "anthropic_messages")
CAPTURE_TESTS = ("test_codec_chat.py", "test_codec_anthropic.py", "test_codec_responses.py",
                 "test_engine.py", "test_continuation.py", "test_fit.py", "test_request_field_coverage.py")
CASES = HERE / "cases.jsonl"
CODEC = HERE / "codec.jsonl"
CORPUS_OUT = HERE / "corpus.jsonl.gz"
CORPUS = TESTS / "corpus"
CLIENT_FIXTURES = TESTS / "fixtures" / "clients"
CLIENT_PROTOCOLS = {"/v1/responses": "openai_responses", "/v1/messages": "anthropic_messages",
                    "/v1/chat/completions": "openai_chat_completions"}
# Prompt caching as providers have it by default, with a fixed key for derived cache keys.
CACHING_ON = {"prompt_caching": "auto", "cache_key_secret": {"$bytes": base64.b64encode(b"golden").decode()}}
FIXED_TIME = 1700000000.0
# Context fields a translation fills in as it runs: not inputs.
_OUTPUT_FIELDS = {"traces", "cache_breakpoints", "cache_key_source", "_vars", "dropped_tools"}
_DEFAULTS = {f.name: (f.default if f.default is not dataclasses.MISSING else f.default_factory())
             for f in dataclasses.fields(engine.Context)
             if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING}


# --- determinism ---------------------------------------------------------------------------------


@contextlib.contextmanager
def pinned():
    """Fixed clock and counted UUIDs (see the module docstring)."""
    counter = iter(range(1, 1 << 62))
    with mock.patch("time.time", lambda: FIXED_TIME), \
            mock.patch("time.time_ns", lambda: int(FIXED_TIME * 1e9)), \
            mock.patch("uuid.uuid4", lambda: uuid.UUID(int=next(counter))):
        yield


# --- contexts ------------------------------------------------------------------------------------


def ctx_to_json(ctx) -> dict:
    out = {}
    for f in dataclasses.fields(ctx):
        if f.name in _OUTPUT_FIELDS or f.name in ("client_protocol", "provider_protocol"):
            continue
        value = getattr(ctx, f.name)
        if f.name in _DEFAULTS and value == _DEFAULTS[f.name]:
            continue
        if isinstance(value, bytes):
            value = {"$bytes": base64.b64encode(value).decode()}
        out[f.name] = copy.deepcopy(value)
    return out


def ctx_from_json(data: dict, client: str, provider: str) -> engine.Context:
    kw = {}
    for k, v in (data or {}).items():
        if k.startswith("$"):
            continue
        if isinstance(v, dict) and set(v) == {"$bytes"}:
            v = base64.b64decode(v["$bytes"])
        kw[k] = copy.deepcopy(v)
    return engine.Context(client_protocol=client, provider_protocol=provider, **kw)


# --- capture -------------------------------------------------------------------------------------


def _rule_file(rules, kind: str) -> bool:
    """A shipped stream rule file (not a test's pass-through source or sink)."""
    return str(rules.file).replace("\\", "/").endswith(f"{rules.protocol}/{kind}.yaml")


class Recorder:
    """A pytest plugin wrapping the engine's entry points; collects each outermost call's input."""

    def __init__(self):
        self.cases: list[dict] = []
        self.seen: set = set()
        self.test = "?"
        self.depth = 0
        self.streams: dict = {}  # id(translator or run) -> case being built
        self._patches = []

    def add(self, case: dict) -> None:
        if case["source"] not in PROTOCOLS:
            return
        try:
            orjson.dumps(case)
        except (TypeError, orjson.JSONEncodeError):
            return
        key = hashlib.sha256(orjson.dumps({k: v for k, v in case.items() if k != "id"},
                                          option=orjson.OPT_SORT_KEYS)).hexdigest()
        if key in self.seen:
            return
        self.seen.add(key)
        case["id"] = f"{self.test}#{len([c for c in self.cases if c['id'].startswith(self.test + '#')])}"
        self.cases.append(case)

    def _wrap_engine(self, name: str, kind: str, side: str):
        original = getattr(engine.Engine, name)
        recorder = self

        def wrapper(eng, ctx, body, *a, **kw):
            if recorder.depth == 0:
                source = ctx.client_protocol if side == "client" else ctx.provider_protocol
                other = ctx.provider_protocol if side == "client" else ctx.client_protocol
                recorder.add({"kind": kind, "source": source, "counterpart": other, "ctx": ctx_to_json(ctx),
                              "input": copy.deepcopy(body)})
            recorder.depth += 1
            try:
                return original(eng, ctx, body, *a, **kw)
            finally:
                recorder.depth -= 1

        self._patches.append(mock.patch.object(engine.Engine, name, wrapper))

    def _wrap_streams(self):
        recorder = self
        t_init, t_feed, t_eof, t_fail, t_push = (StreamTranslator.__init__, StreamTranslator.feed,
                                                 StreamTranslator.eof, StreamTranslator.fail, StreamTranslator.push)
        r_init, r_decode, r_eof = StreamRun.__init__, StreamRun.decode, StreamRun.handle_eof

        def start(obj, kind, source, other, ctx):
            recorder.streams[id(obj)] = {"obj": obj, "kind": kind, "source": source, "counterpart": other,
                                         "ctx": ctx_to_json(ctx), "steps": []}

        def step(obj, item):
            case = recorder.streams.get(id(obj))
            if case is not None and case["obj"] is obj:
                case["steps"].append(copy.deepcopy(item))

        def translator_init(self, decoder, encoder, ctx):
            recorder.depth += 1
            try:
                t_init(self, decoder, encoder, ctx)
            finally:
                recorder.depth -= 1
            if _rule_file(decoder, "stream.decode"):
                start(self, "stream", decoder.protocol, encoder.protocol, ctx)
            elif _rule_file(encoder, "stream.encode"):
                start(self, "ir_stream", encoder.protocol, decoder.protocol, ctx)

        def feed(self, sse):
            case = recorder.streams.get(id(self))
            if case is not None and case["obj"] is self:
                if case["kind"] == "stream":
                    step(self, {"event": sse.event, "data": sse.data})
                else:
                    try:
                        step(self, {"push": [orjson.loads(sse.data)]})
                    except orjson.JSONDecodeError:
                        pass
            return t_feed(self, sse)

        def eof(self):
            case = recorder.streams.get(id(self))
            if case is not None and case["kind"] == "stream":
                step(self, {"eof": True})
            return t_eof(self)

        def fail(self, kind, message, status=502):
            step(self, {"fail": [kind, message, status]})
            return t_fail(self, kind, message, status)

        def push(self, events):
            step(self, {"push": events})
            return t_push(self, events)

        def run_init(self, rules, ctx):
            r_init(self, rules, ctx)
            if recorder.depth == 0 and _rule_file(rules, "stream.decode"):
                start(self, "stream", rules.protocol, ctx.client_protocol, ctx)

        def decode(self, payload):
            if recorder.streams.get(id(self), {}).get("obj") is self:
                data = "[DONE]" if payload.get("type") == "[DONE]" and len(payload) == 1 else json.dumps(payload)
                step(self, {"event": None, "data": data})
            return r_decode(self, payload)

        def run_eof(self):
            if recorder.streams.get(id(self), {}).get("obj") is self:
                step(self, {"eof": True})
            return r_eof(self)

        for name, fn in (("__init__", translator_init), ("feed", feed), ("eof", eof), ("fail", fail), ("push", push)):
            self._patches.append(mock.patch.object(StreamTranslator, name, fn))
        for name, fn in (("__init__", run_init), ("decode", decode), ("handle_eof", run_eof)):
            self._patches.append(mock.patch.object(StreamRun, name, fn))

    def flush_streams(self) -> None:
        for case in self.streams.values():
            case.pop("obj")
            if case["steps"]:
                self.add(case)
        self.streams.clear()

    # pytest hooks
    def pytest_sessionstart(self, session):
        self._wrap_engine("translate_request", "request", "client")
        self._wrap_engine("decode_request", "request", "client")
        self._wrap_engine("encode_request", "ir_request", "provider")
        self._wrap_engine("translate_response", "response", "provider")
        self._wrap_engine("decode_response", "response", "provider")
        self._wrap_engine("encode_response", "ir_response", "client")
        self._wrap_streams()
        for p in self._patches:
            p.start()

    def pytest_runtest_setup(self, item):
        self.flush_streams()
        self.test = item.nodeid.split("/")[-1]
        # Inputs a test builds with the engine itself (a stream encoded, then decoded) carry
        # minted ids and stamps: pinned too, so a re-capture gives the same cases.
        self._pin = pinned()
        self._pin.__enter__()

    def pytest_runtest_teardown(self, item):
        self.flush_streams()
        self._pin.__exit__(None, None, None)

    def pytest_sessionfinish(self, session):
        self.flush_streams()
        for p in reversed(self._patches):
            p.stop()


def capture() -> list[dict]:
    import pytest

    recorder = Recorder()
    files = [str(TESTS / name) for name in CAPTURE_TESTS if (TESTS / name).exists()]
    code = pytest.main(["-q", "-p", "no:randomly", "-p", "no:cacheprovider", *files], plugins=[recorder])
    if code != 0:
        raise SystemExit(f"the codec tests failed (pytest exit {code}); capture from a passing tree")
    return recorder.cases


# --- translation toward every target -------------------------------------------------------------


_ENGINE = None


def full_engine():
    global _ENGINE
    if _ENGINE is None:
        _ENGINE = engine.Engine.load()
    return _ENGINE


def _rejection(err: engine.TranslationError) -> dict:
    return {"status": err.status, "message": err.message, "param": err.param}


def _json(value) -> str:
    return orjson.dumps(value).decode()


def translate(kind: str, source: str, target: str, ctx_data: dict, payload) -> dict:
    """One input toward one target: {"wire": text} or {"error": rejection}."""
    eng = full_engine()
    payload = copy.deepcopy(payload)
    with pinned():
        try:
            if kind == "request":
                ctx = ctx_from_json(ctx_data, source, target)
                return {"wire": _json(eng.translate_request(ctx, payload))}
            if kind == "ir_request":
                ctx = ctx_from_json(ctx_data, ctx_data.get("$client", PROTOCOLS[0]), target)
                return {"wire": _json(eng.encode_request(ctx, payload))}
            if kind == "response":
                ctx = ctx_from_json(ctx_data, target, source)
                return {"wire": _json(eng.translate_response(ctx, payload))}
            if kind == "ir_response":
                ctx = ctx_from_json(ctx_data, target, ctx_data.get("$provider", PROTOCOLS[2]))
                return {"wire": _json(eng.encode_response(ctx, payload))}
            if kind == "stream":
                ctx = ctx_from_json(ctx_data, target, source)
                return {"wire": _run_stream(eng.open_stream(ctx), payload)}
            if kind == "ir_stream":
                ctx = ctx_from_json(ctx_data, target, ctx_data.get("$provider", PROTOCOLS[2]))
                return {"wire": _run_stream(eng.open_stream(ctx), payload)}
        except engine.TranslationError as err:
            return {"error": _rejection(err)}
    raise ValueError(f"unknown case kind {kind!r}")


def _run_stream(translator, steps) -> str:
    out: list[bytes] = []
    for s in steps:
        if "data" in s:
            out += translator.feed(SSEEvent(s.get("event"), s["data"]))
        elif "push" in s:
            out += translator.push(s["push"])
        elif "eof" in s:
            out += translator.eof()
        elif "fail" in s:
            out += translator.fail(*s["fail"])
    return b"".join(out).decode()


def targets(case: dict):
    return PROTOCOLS


def case_inputs(case: dict) -> tuple[dict, object]:
    """(ctx data, payload) of a captured case; the counterpart protocol stays in the ctx data
    for IR cases, whose other side is not varied."""
    ctx = dict(case.get("ctx") or {})
    if case["kind"] == "ir_request":
        ctx["$client"] = case["counterpart"]
    elif case["kind"] in ("ir_response", "ir_stream"):
        ctx["$provider"] = case["counterpart"]
    payload = case["steps"] if case["kind"] in ("stream", "ir_stream") else case["input"]
    return ctx, payload


def _strip_meta(ctx: dict) -> dict:
    return {k: v for k, v in ctx.items() if not k.startswith("$")}


def codec_lines(cases: list[dict]):
    for case in cases:
        ctx, payload = case_inputs(case)
        for target in targets(case):
            meta = {k: v for k, v in ctx.items() if k.startswith("$")}
            out = translate(case["kind"], case["source"], target, {**_strip_meta(ctx), **meta}, payload)
            yield {"case": case["id"], "to": target, **out}


def fixture_lines():
    for path in sorted(CLIENT_FIXTURES.glob("*.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        source = CLIENT_PROTOCOLS[doc["path"].split("?")[0]]
        for variant, ctx in (("", {"provider_name": "p"}), ("+caching", {"provider_name": "p", **CACHING_ON})):
            for target in PROTOCOLS:
                out = translate("request", source, target, dict(ctx, client_body=doc["body"]), doc["body"])
                yield {"case": f"fixtures/clients/{path.name}{variant}", "to": target, **out}


# The corpus, translated as tests/test_corpus_fidelity.py does (Chat streams asked for usage).
def corpus_items() -> list[str]:
    return sorted(str(p.relative_to(CORPUS)) for p in CORPUS.glob("*/*/*/*") if p.suffix in (".json", ".sse"))


def corpus_lines():
    for item in corpus_items():
        path = CORPUS / item
        source, kind = path.parts[-3], path.parts[-2]
        if kind == "request":
            payload = json.loads(path.read_text(encoding="utf-8"))
            ctx = {"provider_name": "p"}
        elif kind == "response":
            payload = json.loads(path.read_text(encoding="utf-8"))
            ctx = {"provider_name": "p", "client_body": {"stream_options": {"include_usage": True}}}
        else:
            payload = [{"event": e.event, "data": e.data} for e in SSEParser().feed(path.read_bytes())] + [{"eof": True}]
            ctx = {"provider_name": "p", "client_body": {"stream_options": {"include_usage": True}}}
        for target in PROTOCOLS:
            yield {"case": item, "to": target, **translate(kind, source, target, ctx, payload)}


# --- files ---------------------------------------------------------------------------------------


def dump_lines(lines) -> bytes:
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


def read_cases() -> list[dict]:
    return [orjson.loads(line) for line in CASES.read_bytes().splitlines() if line.strip()]


def gzip_bytes(data: bytes) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as f:
        f.write(data)
    return buf.getvalue()


def main(argv: list[str]) -> int:
    if "--capture" in argv or not CASES.exists():
        cases = capture()
        CASES.write_bytes(dump_lines(cases))
        print(f"captured {len(cases)} cases -> {CASES.relative_to(ROOT)}")
    cases = read_cases()
    started = time.perf_counter()
    CODEC.write_bytes(dump_lines([*codec_lines(cases), *fixture_lines()]))
    CORPUS_OUT.write_bytes(gzip_bytes(dump_lines(corpus_lines())))
    print(f"wrote {CODEC.relative_to(ROOT)} and {CORPUS_OUT.relative_to(ROOT)} in {time.perf_counter() - started:.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
