"""A protocol's descriptor: `rules/<protocol>/protocol.yaml`.

Everything the server must know about a wire protocol that is not one codec
direction (its family, client endpoints, headers, upstream URLs, HTTP error bodies,
where usage and the stop reason sit) is data in that file. The server reads it only
through the engine (`Engine.protocols`), so a protocol is one rules folder.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from .context import Context
from .errors import RuleError, TranslationError, UpstreamProtocolError
from .scope import Run, Scope
from .yamlsrc import Located

#: how codec files (and protocol.yaml itself) name a protocol-level template: `{$ref: protocol.usage_in}`
SHARED_PREFIX = "protocol."
#: what `summary:` reads off a response body, in the IR's names
SUMMARY_FIELDS = ("usage", "stop", "model", "id")
#: the variables a protocol-level template may read besides its params
GLOBALS = frozenset({"ctx", "root"})
#: the templates of `errors:`: the HTTP error body and its parse; a failed response's
#: error object; the in-stream error the server writes outside the stream rules
ERROR_TEMPLATES = ("encode", "decode", "failure", "stream")


@dataclass(frozen=True)
class Descriptor:
    """One protocol's descriptor after layering (an override's keys merged over the
    built-in file's, section by section)."""
    name: str
    doc: Any          # the layered yamlsrc.Located document
    file: str         # the file that last contributed to it
    # compiled by compile_descriptor: summary field -> template; the error body and its parse
    summary_rules: dict = field(default_factory=dict)
    error_encode: Callable | None = None
    error_decode: Callable | None = None
    # the other `errors:` templates by name (`failure`, `stream`), over the IR error
    error_rules: dict = field(default_factory=dict)
    # `models:` item and list templates
    model_rules: dict = field(default_factory=dict)

    def section(self, key: str) -> dict:
        value = self.doc.get(key)
        return value if isinstance(value, dict) else {}

    @property
    def family(self) -> str | None:
        return self.doc.get("family")

    def where(self, key: str) -> str:
        """`file:line` of a top-level key, for error messages."""
        line = getattr(self.doc, "key_lines", {}).get(key, getattr(self.doc, "line", None))
        return f"{self.file}:{line}" if line else self.file

    @property
    def error_vocabulary(self) -> str | None:
        """The error-type vocabulary of this protocol's error bodies (`errors.vocabulary`): an
        upstream error's own type is kept for a client of the same vocabulary."""
        return self.section("errors").get("vocabulary")

    def summarise(self, body) -> dict:
        """{usage, stop, model, id} of a response body by the `summary:` templates; a field
        the rules cannot read (a malformed body) is None: this feeds logs and metrics, and
        must not fail a response the client already has."""
        out = {}
        scope = _scope(body, self.name)  # the templates only read: one scope serves them all
        for name, fn in self.summary_rules.items():
            try:
                out[name] = fn(scope)
            except (TranslationError, TypeError, ValueError, AttributeError, KeyError, IndexError):
                out[name] = None
        return out


class _Named(Located):
    """Named templates gathered from several files: each name knows its own file."""

    __slots__ = ("key_files",)

    def __init__(self, *args, key_files=None, **kw):
        super().__init__(*args, **kw)
        self.key_files = key_files or {}

    def where(self, key=None) -> str:
        line = self.key_lines.get(key, self.line) if key is not None else self.line
        return f"{self.key_files.get(key, self.file)}:{line}"


def shared_templates(doc, file: str, own=None) -> Located:
    """A codec file's named templates: its own (`own`), and its protocol's `templates:`
    as `protocol.<name>`. ``doc`` is the protocol's layered descriptor document (or None)."""
    out = _Named(file=getattr(own, "file", file), line=getattr(own, "line", None))
    templates = (doc or {}).get("templates") or {}
    for name, src in templates.items():
        key = SHARED_PREFIX + str(name)
        out[key] = src
        out.key_lines[key] = getattr(templates, "key_lines", {}).get(name)
        out.key_files[key] = getattr(templates, "file", None) or (doc.file if isinstance(doc, Located) else file)
    for name, src in (own or {}).items():
        out[name] = src
        out.key_lines[name] = getattr(own, "key_lines", {}).get(name)
    return out


def compile_descriptor(name: str, doc, file: str, hooks: dict, tables: dict) -> Descriptor:
    """The descriptor with its `summary:` and `errors:` templates compiled by the engine's
    template compiler (the one every codec uses), their variables checked."""
    from .stream import free_variables
    from .template import Compiler, template_params

    named = shared_templates(doc, file)
    compiler = Compiler(file, hooks, tables, named)

    def check_free(node, bound, what, parent, key):
        for var, at in free_variables(node, bound, named, node):
            where = at if isinstance(at, Located) else parent
            raise compiler.error(where, f"{what} reads ${var}, which nothing binds (declare it in the "
                                        f"template's params and pass it in $args)", key if where is parent else None)

    for tname, src in named.items():
        params, body = template_params(src)
        check_free(body, GLOBALS | set(params or ()), f"template {tname!r}", named, tname)
        compiler.ref(tname)  # every shared template compiles, used here or not
    summary = doc.get("summary") or {}
    rules = {}
    for key in SUMMARY_FIELDS:
        if key in summary:
            check_free(summary[key], GLOBALS, f"summary.{key}", summary, key)
            rules[key] = compiler.build(summary[key], summary, key)
    errors = doc.get("errors") or {}
    compiled = {}
    for key in ERROR_TEMPLATES:
        if key in errors:
            check_free(errors[key], GLOBALS, f"errors.{key}", errors, key)
            compiled[key] = compiler.build(errors[key], errors, key)
    encode, decode = compiled.pop("encode", None), compiled.pop("decode", None)
    models = doc.get("models") or {}
    listing = {}
    for key in ("item", "list"):
        if key in models:
            check_free(models[key], GLOBALS, f"models.{key}", models, key)
            listing[key] = compiler.build(models[key], models, key)
    return Descriptor(name, doc, file, rules, encode, decode, compiled, listing)


def _scope(payload, protocol: str):
    ctx = Context(client_protocol=protocol, provider_protocol=protocol)
    return Scope(payload, {"root": payload, "ctx": ctx.vars()}, "", ctx, Run(UpstreamProtocolError))


def _run(fn, payload, protocol: str):
    return fn(_scope(payload, protocol))


def run_template(fn, payload, protocol: str, what: str = "errors"):
    """Evaluate one compiled descriptor template over ``payload``."""
    if fn is None:
        raise RuleError(f"{protocol}: protocol.yaml has no {what} rules")
    return _run(fn, payload, protocol)
