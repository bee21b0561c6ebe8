"""Stream codecs and the per-stream pipeline.

    upstream SSE event -> decoder transitions -> IR events -> [serializer] -> encoder transitions -> client SSE bytes

A ``stream.decode`` / ``stream.encode`` rule file lists, per event key, transitions
tried in order; the first whose ``when`` holds runs its ``steps``: an ordered list
whose items each do one thing (rules/README.md, "Stream rules"):

    - let: {name: template}     bind names the later steps read
    - do: template              evaluate for effect (a stateful object's method)
    - set: {key: template}      assign $state keys
    - emit: [template, ...]     the events to emit (a list result is flattened)

A stream fails as templates do, with ``{$fail: message}`` (an upstream protocol error).

A step's own keys are independent (every value is evaluated before any is bound or
assigned), so key order never matters. Per-stream state is the file's ``state:``:
plain values (``$state``) and stateful objects (``name: {object: registered.name}``),
whose methods rules call as hooks ``name.method`` and whose fields only those methods
see. Nothing is global.
"""
from __future__ import annotations

import copy

import orjson

from .errors import TranslationError, UpstreamProtocolError, suggestion
from . import registry
from .registry import template_params
from .template import Compiler, Run, Scope
from .toolcalls import StreamRestorer

IR_TERMINAL = "message_stop"
#: the IR events StreamTranslator._observe acts on
_OBSERVED = frozenset({"block_start", "block_stop", IR_TERMINAL, "error"})

#: the variables every stream template may read; others must be bound by a step
#: (``let``), a template parameter, ``$let`` or ``$map``.
GLOBALS = frozenset({"ctx", "state", "root"})
STEP_ACTIONS = ("let", "do", "set", "emit")
# Where a run's objects sit in its variables: not a name a selector can spell.
_OBJECTS = "@objects"

V1_HINT = ("stream rules v1: `do`, `set`, `emit` and `error` side by side ran in key order. "
           "Write `steps:` as an ordered list of one-action items, e.g. "
           "steps: [{let: {b: {$hook: ...}}}, {set: {...}}, {emit: [...]}]")


def free_variables(node, bound: frozenset, named=None, where_node=None):
    """:func:`engine.registry.free_variables` (``named`` is not needed)."""
    return registry.free_variables(node, bound, where_node)


def _check_free(compiler: Compiler, node, bound: frozenset, what: str, parent=None, key=None) -> None:
    """``node`` sits at ``parent[key]``: where a selector that is the whole template is reported."""
    for name, at in registry.free_variables(node, bound, node):
        if at is node and isinstance(node, str):
            at = parent  # a string has no line of its own
        else:
            key = None
        raise compiler.error(at if at is not None else node,
                             f"{what} reads ${name}, which nothing binds (bind it with a `let` step, "
                             f"or declare it in the template's params and pass it in $args)", key)


class Transition:
    """One transition of a stream rule file, checked; ``run`` is its generated function,
    ``run(event, vars, scope, out) -> bool``: False when its `when` does not hold, else
    its steps ran (engine/codegen.py)."""

    __slots__ = ("node", "steps", "where", "run")

    def __init__(self, node, compiler: Compiler):
        if not isinstance(node, dict):
            raise compiler.error(node, "a transition is a mapping with `when` and `steps`")
        old = [k for k in node if k in ("do", "set", "emit", "error")]
        if old:
            raise compiler.error(node, f"{V1_HINT} (found {', '.join(old)})", old[0])
        unknown = [k for k in node if k not in ("when", "steps")]
        if unknown:
            raise compiler.error(node, f"a transition takes `when` and `steps`, not {unknown[0]!r}", unknown[0])
        self.where = compiler.where(node)
        bound = GLOBALS
        if "when" in node:
            _check_free(compiler, node["when"], bound, "`when`", node, "when")
            compiler.check(node["when"], node)
        self.node, self.run = node, None
        self.steps = []  # (action, its value) of each step, for the generated function
        steps = node.get("steps") or []
        if not isinstance(steps, list):
            raise compiler.error(node, "`steps` is a list: one action per item, run in order", "steps")
        for step in steps:
            if isinstance(step, dict) and "error" in step:
                raise compiler.error(step, "a stream fails the way templates do: write "
                                           "`- do: {$fail: \"<message>\"}` in place of `- error: <message>`", "error")
            actions = [k for k in step if k in STEP_ACTIONS] if isinstance(step, dict) else []
            if not isinstance(step, dict) or len(actions) != 1 or len(step) != 1:
                raise compiler.error(step if isinstance(step, dict) else steps,
                                     f"a step is a mapping with exactly one of {', '.join(STEP_ACTIONS)} "
                                     f"(found {', '.join(map(str, step)) if isinstance(step, dict) else type(step).__name__}); "
                                     "write each action as its own list item, in the order it must run")
            kind = actions[0]
            value = step[kind]
            self.steps.append((kind, value))
            if kind in ("let", "set"):
                if not isinstance(value, dict) or not value:
                    raise compiler.error(step, f"`{kind}` takes a mapping of name -> template", kind)
                for k, v in value.items():
                    _check_free(compiler, v, bound, f"`{kind}`", value, k)
                for v in value.values():
                    compiler.check(v, value)
                if kind == "let":
                    clash = [k for k in value if k in GLOBALS]
                    if clash:
                        raise compiler.error(value, f"`let` cannot rebind ${clash[0]}", clash[0])
                    bound = bound | set(map(str, value))
            elif kind == "emit":
                _check_free(compiler, value, bound, "`emit`", step, "emit")
                for v in value if isinstance(value, list) else [value]:
                    compiler.check(v, value)
            else:
                _check_free(compiler, value, bound, "`do`", step, "do")
                compiler.check(value, step)


def _method_hook(obj_name: str, method: str):
    def call(scope, **args):
        return getattr(scope.vars[_OBJECTS][obj_name], method)(**args)
    call.__name__ = f"{obj_name}.{method}"
    call.method_of = (obj_name, method)  # generated code calls the method itself
    return call


class StreamRules:
    """A compiled ``stream.decode`` or ``stream.encode`` rule file."""

    def __init__(self, doc: dict, compiler: Compiler):
        from .hooks import OBJECTS as BUILTIN, PROTOCOL_OBJECTS

        OBJECTS = {**BUILTIN, **PROTOCOL_OBJECTS}
        self.kind, self.protocol, self.file = doc["kind"], doc["protocol"], compiler.file
        self.initial_state, self.objects = {}, {}
        state = doc.get("state") or {}
        for name, value in state.items():
            if isinstance(value, dict) and "object" in value:
                cls = OBJECTS.get(value["object"])
                if cls is None or set(value) != {"object"}:
                    raise compiler.error(state, f"state {name!r}: unknown object {value.get('object')!r} "
                                                f"(known: {', '.join(sorted(OBJECTS))})", name)
                self.objects[str(name)] = cls
            else:
                self.initial_state[str(name)] = copy.deepcopy(value)
        # A stateful object's methods are hooks named `<object>.<method>` in this file only.
        hooks = dict(compiler.hooks)
        for name, cls in self.objects.items():
            for method in (m for m in dir(cls) if not m.startswith("_") and callable(getattr(cls, m))):
                if f"{name}.{method}" in compiler.hooks:
                    raise compiler.error(state, f"state object {name!r} shadows hook {name}.{method}", name)
                hooks[f"{name}.{method}"] = _method_hook(name, method)
        compiler.hooks = hooks
        for tname, src in compiler.named_src.items():
            params, body = template_params(src)
            _check_free(compiler, body, GLOBALS | set(params or ()), f"template {tname!r}", compiler.named_src, tname)
        self.on = {str(k): [Transition(t, compiler) for t in v] for k, v in doc["on"].items()}
        self.eof = [Transition(t, compiler) for t in doc.get("eof") or []]
        self.key = compiler.compile(doc["key"], doc, "key") if "key" in doc else None
        self.split = self._entry(doc, "split", compiler)
        self.stamp = self._entry(doc, "stamp", compiler)
        # `split` / `stamp` as (object, method) when a state object's: a run calls it directly
        self.split_method, self.stamp_method = (self._method(doc, k) for k in ("split", "stamp"))
        # plain values (the usual state) are copied per stream without deepcopy's walk
        self.flat_state = all(v is None or isinstance(v, (str, int, float)) for v in self.initial_state.values())
        self.named_sse = doc.get("sse", "named") == "named"
        # the data field an `event:` line repeats (Interactions names its events in event_type)
        self.event_name = str(doc.get("event_name", "type"))
        self.overlap = doc.get("overlap", True)
        self.unknown_is_error = doc.get("unknown", "ignore") == "error"
        for name in compiler.named_src:
            compiler.ref(name)
        # generated once the whole file is checked
        for t in (t for ts in (*self.on.values(), self.eof) for t in ts):
            t.run = compiler.generator.transition(t.node, t.steps)

    def _method(self, doc, key):
        obj, _, method = str(doc.get(key, "")).partition(".")
        return (obj, method) if obj in self.objects else None

    def _entry(self, doc, key, compiler):
        """`split` / `stamp`: a hook or an object's method, given the wire event."""
        if key not in doc:
            return None
        name = str(doc[key])
        obj, _, method = name.partition(".")
        if obj in self.objects:
            if not callable(getattr(self.objects[obj], method, None)) or method.startswith("_"):
                raise compiler.error(doc, f"state object {obj!r} has no method {method!r}", key)
            return lambda scope: getattr(scope.vars[_OBJECTS][obj], method)(scope.cur)
        hook = compiler.hooks.get(name)
        if hook is None:
            hint = suggestion(name, compiler.hooks)
            raise compiler.error(doc, f"unknown hook {name!r}" + (f"; {hint}" if hint else ""), key)
        return hook


class StreamRun:
    """One stream's run of a StreamRules: its own state."""

    def __init__(self, rules: StreamRules, ctx):
        self.rules, self.ctx = rules, ctx
        self.state = dict(rules.initial_state) if rules.flat_state else copy.deepcopy(rules.initial_state)
        self.objects = {name: cls(ctx) for name, cls in rules.objects.items()}
        self.vars = {"ctx": ctx.vars(), "state": self.state, "root": None, _OBJECTS: self.objects}
        self.run = Run(UpstreamProtocolError)
        # What the generated transitions take their ctx and run from (not an item).
        self.base = Scope(None, self.vars, "", ctx, self.run)
        obj = rules.split_method
        self.split = getattr(self.objects[obj[0]], obj[1]) if obj is not None else \
            (lambda payload: rules.split(Scope(payload, self.vars, "", self.ctx, self.run))) if rules.split is not None else None
        obj = rules.stamp_method
        self.stamp = getattr(self.objects[obj[0]], obj[1]) if obj is not None else \
            (lambda item: rules.stamp(Scope(item, self.vars, "", self.ctx, self.run))) if rules.stamp is not None else None

    def handle(self, key: str, event) -> list:
        transitions = self.rules.on.get(key)
        if transitions is None:
            if self.rules.unknown_is_error:
                raise UpstreamProtocolError(f"unexpected {self.rules.protocol} stream event {key!r}")
            return []
        out: list = []
        for t in transitions:
            try:
                if t.run(event, self.vars, self.base, out):
                    break
            except TranslationError as err:
                if err.rule is None:
                    err.rule = t.where
                raise
            except (TypeError, ValueError, AttributeError, KeyError, IndexError) as err:
                raise UpstreamProtocolError(f"malformed {self.rules.protocol} stream event {key!r}", None, t.where) from err
        return out

    def handle_eof(self) -> list:
        out: list = []
        for t in self.rules.eof:
            if t.run({}, self.vars, self.base, out):
                break
        return out

    def decode(self, payload) -> list:
        """Wire event (parsed) -> IR events."""
        rules = self.rules
        if self.split is not None:
            out = []
            for sub in self.split(payload):
                out.extend(self.handle(sub["type"], sub))
            return out
        key = rules.key(Scope(payload, self.vars, "", self.ctx, self.run)) if rules.key else payload.get("type")
        return self.handle(str(key), payload)


class BlockSerializer:
    """Holds later blocks while one is open (docs/decisions.md #11): Anthropic and Responses
    clients assume one open block/item at a time, but a Chat upstream may interleave
    parallel tool calls. The first block streams live; the others follow in start order."""

    __slots__ = ("current", "pending", "buffers")

    def __init__(self):
        self.current = None
        self.pending: list = []
        self.buffers: dict = {}

    def push(self, ev: dict) -> list:
        kind = ev["type"]
        if kind == "block_start":
            if self.current is None and not self.pending:
                self.current = ev["index"]
                return [ev]
            self.pending.append(ev["index"])
            self.buffers[ev["index"]] = [ev]
            return []
        if kind in ("block_delta", "block_opaque", "block_stop"):
            index = ev["index"]
            if index != self.current:
                buffer = self.buffers.get(index)
                if buffer is None:
                    return [ev]
                buffer.append(ev)
                return []
            if kind == "block_stop":
                self.current = None
                return [ev, *self._drain()]
            return [ev]
        if kind == IR_TERMINAL:
            return [*self._drain(everything=True), ev]
        return [ev]

    def _drain(self, everything: bool = False) -> list:
        out = []
        while self.pending and (self.current is None or everything):
            index = self.pending.pop(0)
            buffered = self.buffers.pop(index)
            self.current = index
            for ev in buffered:
                out.append(ev)
                if ev["type"] == "block_stop":
                    self.current = None
        return out


def error_event(err: TranslationError) -> dict:
    """The IR error for a source event the rules could not translate. It is the
    provider's fault as far as the client can tell: 502, whatever the error class."""
    return {"type": "error", "status": 502, "error_type": "upstream_protocol_error", "message": err.message or str(err)}


class StreamTranslator:
    """Translates one upstream SSE stream into the client's protocol, event by event."""

    def __init__(self, decoder: StreamRules, encoder: StreamRules, ctx):
        self.ctx = ctx
        self.decoder = StreamRun(decoder, ctx)
        self.encoder = StreamRun(encoder, ctx)
        self.serializer = None if encoder.overlap else BlockSerializer()
        # Calls of tools the provider saw under another name or form (engine/toolcalls.py).
        self.restorer = StreamRestorer(ctx.tool_calls) if getattr(ctx, "tool_calls", None) else None
        self.named = encoder.named_sse
        self.event_name = encoder.event_name
        self.stamp = self.encoder.stamp
        self.complete = False
        self.failed = False
        # True when the stream failed because a source event could not be translated
        # (as opposed to an upstream error event, EOF or a timeout).
        self.translation_failed = False
        self.error_rule = None  # the rule file:line of that failure
        self.error = None  # the IR error event that ended the stream
        self.usage = None
        self.stop = None
        self._open_tools: set = set()
        # Off (None) unless inspect() was called; see there.
        self.links: list | None = None
        self._fed = 0
        self._source: int | None = None
        self._origins: dict = {}

    def inspect(self) -> list:
        """Record which source event produced each client event: a list of
        (source event number from 1 in feed order, or None for EOF and failures,
        client SSE bytes). Held-back blocks (BlockSerializer) keep their origin."""
        self.links = []
        return self.links

    @property
    def in_tool_arguments(self) -> bool:
        return bool(self._open_tools)

    @property
    def done(self) -> bool:
        return self.complete or self.failed

    def feed(self, sse) -> list[bytes]:
        if self.links is not None:
            self._fed += 1
            self._source = self._fed
        if self.complete or self.failed:
            return []
        data = sse.data
        if data == "[DONE]":
            payload = {"type": "[DONE]"}
        else:
            try:
                payload = orjson.loads(data)
            except orjson.JSONDecodeError:
                return self._emit([{"type": "error", "status": 502, "error_type": "upstream_protocol_error",
                                    "message": f"malformed upstream {self.ctx.provider_protocol} stream event (not JSON)"}])
            if not isinstance(payload, dict):
                return self._emit([{"type": "error", "status": 502, "error_type": "upstream_protocol_error",
                                    "message": "malformed upstream stream event (not an object)"}])
            if sse.event and "type" not in payload:
                payload["type"] = sse.event
        try:
            events = self.decoder.decode(payload)
        except TranslationError as err:
            self.translation_failed = True
            self.error_rule = err.rule
            events = [error_event(err)]
        return self._emit(events)

    def eof(self) -> list[bytes]:
        self._source = None
        if self.complete or self.failed:
            return []
        try:
            events = self.decoder.handle_eof()
        except TranslationError as err:
            events = [error_event(err)]
        if not any(e.get("type") in (IR_TERMINAL, "error") for e in events):
            events.append({"type": "error", "status": 502, "error_type": "incomplete_stream",
                           "message": "upstream stream ended before its terminal event"})
        return self._emit(events)

    def fail(self, kind: str, message: str, status: int = 502) -> list[bytes]:
        self._source = None
        if self.complete or self.failed:
            return []
        return self._emit([{"type": "error", "status": status, "error_type": kind, "message": message}])

    def push(self, events: list) -> list[bytes]:
        """Run IR events through the encoder (for tests and the translate dry-run)."""
        if self.complete or self.failed:
            return []
        return self._emit(events)

    def _emit(self, events: list) -> list[bytes]:
        out: list[bytes] = []
        if self.restorer is None and getattr(self.ctx, "tool_calls", None):
            # A later provider call of the same answer (a server tool's round) may send
            # tools the first did not (the ones a tool search loaded).
            self.restorer = StreamRestorer(self.ctx.tool_calls)
        if self.restorer is not None:
            events = [r for ev in events for r in self.restorer.push(ev)]
        model = getattr(self.ctx, "response_model", None)
        for ev in events:
            if model is not None and ev["type"] == "message_start":
                ev = {**ev, "model": model}
            if ev["type"] in _OBSERVED:
                self._observe(ev)
            if self.links is not None:
                self._origins[id(ev)] = self._source
            staged = self.serializer.push(ev) if self.serializer is not None else (ev,)
            for item in staged:
                self._encode(item, out)
                if self.complete or self.failed:
                    return out
        return out

    def _encode(self, ev: dict, out: list) -> None:
        kind = ev["type"]
        try:
            wire = self.encoder.handle(kind, ev)
        except TranslationError as err:
            if kind == "error":
                raise
            self.translation_failed = True
            self.error_rule = err.rule
            self._encode(error_event(err), out)
            return
        if self.links is None:
            if wire:
                sse = self._sse
                for item in wire:
                    out.append(sse(item))
        else:
            source = self._origins.pop(id(ev), self._source)
            for item in wire:
                out.append(self._sse(item))
                self.links.append((source, out[-1]))
        if kind == IR_TERMINAL:
            self.complete = True
        elif kind == "error":
            self.failed = True

    def _observe(self, ev: dict) -> None:
        kind = ev["type"]
        if kind == "block_start" and ev.get("kind") == "tool_call":
            self._open_tools.add(ev["index"])
        elif kind == "block_stop":
            self._open_tools.discard(ev["index"])
        elif kind == IR_TERMINAL:
            self._open_tools.clear()
            self.usage = ev.get("usage")
            self.stop = ev.get("stop")
        elif kind == "error":
            self._open_tools.clear()
            if self.error is None:
                self.error = ev

    def _sse(self, item) -> bytes:
        if isinstance(item, str):
            return b"data: " + item.encode() + b"\n\n"
        if self.stamp is not None:
            item = self.stamp(item)
        if self.named:
            return b"".join((b"event: ", item[self.event_name].encode(), b"\ndata: ", orjson.dumps(item), b"\n\n"))
        return b"".join((b"data: ", orjson.dumps(item), b"\n\n"))
