"""Request and response codecs: one rule file each, run as reject -> before -> output -> after."""
from __future__ import annotations

import functools
import re

from .errors import InvalidRequest, TranslationError, UpstreamProtocolError
from .expr import truthy
from .constructs import compile_fail
from .template import Compiler, Run, Scope

#: values that count as absent for advisory fields (docs/mappings.md "neutral values")
NEUTRAL = (None, False, 0, "", [], {})


class Codec:
    """A compiled ``request.*`` or ``response.*`` rule file."""

    def __init__(self, doc: dict, compiler: Compiler):
        self.kind, self.protocol, self.file = doc["kind"], doc["protocol"], compiler.file
        request = self.kind.startswith("request")
        self.run = Run(InvalidRequest if request else UpstreamProtocolError, annotate_paths=self.kind == "request.decode")
        self.params = dict(doc.get("params") or {})
        # A reject table is data; each entry fails through the one failure construct, $fail.
        self.rejects = [(compiler.build(r["when"], r, "when"), compile_fail(compiler, {"$fail": r["message"], "$param": r["param"]}),
                         compiler.where(r)) for r in doc.get("reject") or []]
        self.advisory = [_advisory_path(entry) for entry in doc.get("advisory") or []]
        self.before = [_hook(compiler, name, doc) for name in doc.get("before") or []]
        self.after = [_hook(compiler, name, doc) for name in doc.get("after") or []]
        for name in compiler.named_src:
            compiler.ref(name)
        self.output = compiler.build(doc["output"], doc)

    def apply(self, payload, ctx):
        if self.params:
            ctx.param_names.update(self.params)
        scope = Scope(payload, {"root": payload, "ctx": ctx.vars()}, "", ctx, self.run)
        for when, fail, where in self.rejects:
            if truthy(when(scope)):
                try:
                    fail(scope)
                except TranslationError as err:
                    err.rule = where
                    raise
        if self.advisory and isinstance(payload, dict):
            # An encoder's fields have no slot in its own protocol; a decoder's have none in the
            # canonical model, so none in the protocol the payload is going to.
            if self.kind.endswith("encode"):
                target = self.protocol
            else:
                target = ctx.provider_protocol if self.kind.startswith("request") else ctx.client_protocol
            for steps in self.advisory:
                for where, value in _walk(payload, steps, ""):
                    if value not in NEUTRAL:
                        ctx.trace(f"dropped advisory field {ctx.param_names.get(where, where)} (no slot in {target})")
        for hook in self.before:
            payload = hook(scope)
            scope = scope.at(payload)
            scope.vars["root"] = payload
        try:
            out = self.output(scope)
        except (TypeError, ValueError, AttributeError, KeyError, IndexError) as err:
            raise self.run.error_class(f"malformed {self.protocol} payload ({type(err).__name__})", None, self.file) from err
        for hook in self.after:
            out = hook(scope.at(out))
        if self.kind == "request.encode":
            _strip_paths(out)
        return out


def _strip_paths(value) -> None:
    """Drop the decoder's ``_path`` annotations from a provider request: an encoder
    that copies an IR object wholesale must not leak them upstream."""
    if isinstance(value, dict):
        if isinstance(value.get("_path"), str):
            del value["_path"]
        for item in value.values():
            if isinstance(item, (dict, list)):
                _strip_paths(item)
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)):
                _strip_paths(item)


_STEP = re.compile(r"([A-Za-z_]\w*)((?:\[(?:\*|type=[\w.-]+)\])*)")


def _advisory_path(entry: str) -> list[tuple]:
    """``messages[*].content[type=document].citations`` -> steps: ("field", name),
    ("each", None) for ``[*]``, ("each", "document") for ``[type=document]``."""
    steps: list[tuple] = []
    for part in entry.split("."):
        match = _STEP.fullmatch(part)
        if match is None:
            raise ValueError(f"bad advisory path {entry!r}")
        steps.append(("field", match.group(1)))
        for sel in re.findall(r"\[([^\]]+)\]", match.group(2)):
            steps.append(("each", None if sel == "*" else sel[len("type="):]))
    return steps


def _walk(value, steps, where):
    """(wire path, value) for every place an advisory path reaches."""
    if not steps:
        yield where, value
        return
    (kind, arg), rest = steps[0], steps[1:]
    if isinstance(value, dict) and isinstance(value.get("_path"), str):
        where = value["_path"]  # an IR item decoded from the client's wire: name the client's field
    if kind == "field":
        if isinstance(value, dict) and arg in value:
            yield from _walk(value[arg], rest, f"{where}.{arg}" if where else arg)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if arg is None or (isinstance(item, dict) and item.get("type") == arg):
                yield from _walk(item, rest, f"{where}[{i}]")


def _hook(compiler: Compiler, name: str, doc):
    hook = compiler.hooks.get(name)
    if hook is None:
        raise compiler.error(doc, f"unknown hook {name!r}")
    if getattr(hook, "reads_tables", False):  # a whole-payload pass that looks values up in rules/tables
        return functools.partial(hook, tables=compiler.tables)
    return hook
