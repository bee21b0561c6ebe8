"""Templates: the plain-data language rule files use to build one payload from another.

A template is YAML data:

* a string is a selector (see :mod:`engine.expr`);
* ``!lit text`` (loaded as ``{"$lit": "text"}``) is a literal; a number, boolean or
  null is itself;
* a mapping without ``$`` keys builds an object; keys whose value is null are left out
  (``{$nullable: x}`` keeps the key, with value null);
* a list builds a list (null items left out);
* a mapping with a ``$`` key is a construct of :data:`engine.registry.CONSTRUCTS`, with
  its options as sibling ``$`` keys.

The compiler checks every node against the registry (the same check the linter runs,
since the linter runs this compiler) and attaches the rule location to errors;
:class:`Scope` carries the data path so rejections name the client's field
(``messages[2].content[1]``).
"""
from __future__ import annotations

import re
from typing import Any, Callable

from . import expr as _expr
from .errors import InvalidRequest, RuleError, TranslationError
from .yamlsrc import Located, LocatedList

Fn = Callable[["Scope"], Any]

#: generate Python for templates at load (engine/codegen.py); off: the closures run
CODEGEN = True

# A variable or a plain field path inside one: $state.id
_VAR_PATH = re.compile(r"^\$[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")


class Scope:
    """Where evaluation stands: current item, variables, data path, context."""

    __slots__ = ("cur", "vars", "path", "ctx", "run")

    def __init__(self, cur, vars, path, ctx, run):
        self.cur, self.vars, self.path, self.ctx, self.run = cur, vars, path, ctx, run

    def at(self, cur, path=None, **bind) -> "Scope":
        vars = self.vars
        if bind:
            vars = {**vars, **bind}
        return Scope(cur, vars, self.path if path is None else path, self.ctx, self.run)

    def param(self, sub: str | None = None) -> str | None:
        path = self.path
        if sub:
            if not path and self.ctx is not None:
                sub = self.ctx.param_names.get(sub, sub)
            path = f"{path}.{sub}" if path else sub
        return path or None

    def fail(self, message: str, sub: str | None = None, rule: str | None = None):
        raise self.run.error_class(message, self.param(sub), rule)


class Run:
    """What one evaluation needs besides data: the error class for its direction."""

    __slots__ = ("error_class", "annotate_paths")

    def __init__(self, error_class=InvalidRequest, annotate_paths=False):
        self.error_class, self.annotate_paths = error_class, annotate_paths


class Compiler:
    """Compiles templates of one rule file; knows its hooks, tables and named templates.

    ``legacy`` (true, or a set of file names) lets v1 idioms of those files through,
    compiled as before, instead of failing on them; ``found`` (a list) collects every
    v1 idiom met, as :class:`engine.registry.V1Idiom`: the migration reads it.
    ``observe(selector, where, depth)``, when given, sees every selector compiled;
    ``depth`` counts the ``$map`` items it is inside (0: the input itself).
    """

    def __init__(self, file: str, hooks: dict, tables: dict, named: dict | None = None,
                 legacy=False, found: list | None = None, observe=None):
        self.file, self.hooks, self.tables = file, hooks, tables
        self.named_src = named or {}
        self.named: dict[str, Fn] = {}
        self.legacy = True if found is not None else legacy
        self.found = found
        self.observe = observe
        self.depth = 0
        # The server's load (no lint or migration watching) also generates Python for each
        # template once the closures have checked it (engine/codegen.py).
        self.fast = CODEGEN and found is None and observe is None
        self.closures: dict[int, Fn] = {}  # id(construct node) -> its closure, for what codegen leaves to it
        self._generator = None
        from . import registry  # the registry's constructs build on this module's classes

        self.registry = registry

    def where(self, node, key=None) -> str:
        if isinstance(node, (Located, LocatedList)):
            return node.where(key)
        return f"{self.file}:{getattr(node, 'line', 0)}"

    def error(self, node, problem: str, key=None) -> RuleError:
        file, _, line = self.where(node, key).rpartition(":")
        return RuleError(problem, file, int(line) if line.isdigit() else None)

    def v1(self, node, key, idiom) -> None:
        """A v1 idiom at ``node[key]``: an error, or (legacy) recorded and let through."""
        if self.found is not None:
            idiom.where = self.where(node, key)
            self.found.append(idiom)
        legacy = self.legacy
        if legacy is not True and not (legacy and getattr(node, "file", self.file) in legacy):
            raise self.error(node, idiom.message(), key)

    def compile(self, node, parent=None, key=None) -> Fn:
        """Compile ``node``, found at ``parent[key]`` (for error locations)."""
        if isinstance(node, str):
            if self.observe is not None:
                self.observe(node, self.where(parent, key), self.depth)
            if parent is not None:
                idiom = self.registry.v1_literal(node)
                if idiom is not None:
                    self.v1(parent, key, idiom)
            return _expr.compile_expr(node, self.where(parent, key) if parent is not None else f"{self.file}:0")
        if isinstance(node, dict):
            if not any(isinstance(k, str) and k.startswith("$") for k in node):
                return self._object(node)
            construct = self.registry.construct_of(self, node)
            fn = construct.compile(self, node)
            # Only constructs that can fail get the (cheap, but per-call) error wrapper;
            # failures inside the others surface at the nearest wrapped one.
            fn = _located(fn, self.where(node)) if construct.fallible else fn
            if self.fast:
                self.closures[id(node)] = fn
            return fn
        if isinstance(node, list):
            return self._list(node)
        return lambda scope, value=node: value

    @property
    def generator(self):
        if self._generator is None:
            from .codegen import Generator

            self._generator = Generator(self)
        return self._generator

    def build(self, node, parent=None, key=None) -> Fn:
        """:meth:`compile` for a whole template (not a part of one): checked by the
        closure compiler, then, for the server, generated as one Python function."""
        fn = self.compile(node, parent, key)
        return self.generator.template(node, parent, key) if self.fast else fn

    def _object(self, node: dict) -> Fn:
        """An object template becomes one generated function: plain field paths and
        literals are inlined, other values call their compiled closures. Objects are
        the most common template node, and this saves a call per field."""
        env: dict = {"NULL": NULL}
        lines = ["def build(scope):", "    cur = scope.cur", "    d = cur if isinstance(cur, dict) else None", "    out = {}"]
        for i, (key, value) in enumerate(node.items()):
            k = repr(key)
            if isinstance(value, str) and self.observe is not None:
                self.observe(value, self.where(node, key), self.depth)
            idiom = self.registry.v1_literal(value) if isinstance(value, str) else None
            if idiom is not None:
                self.v1(node, key, idiom)
                value = None if idiom.value is None else {"$lit": idiom.value}
            if isinstance(value, str) and _expr._FIELD_PATH.match(value):
                first, *rest = value.split(".")
                lines.append(f"    v = d.get({first!r}) if d is not None else None")
                for step in rest:
                    lines.append(f"    v = v.get({step!r}) if isinstance(v, dict) else None")
                lines.append(f"    if v is not None: out[{k}] = v")
            elif isinstance(value, str) and _VAR_PATH.match(value):
                name, _, path = value[1:].partition(".")
                lines.append(f"    v = scope.vars.get({name!r})")
                for step in path.split(".") if path else ():
                    lines.append(f"    v = v.get({step!r}) if isinstance(v, dict) else None")
                lines.append(f"    if v is not None: out[{k}] = v")
            elif isinstance(value, dict) and set(value) == {"$lit"} and isinstance(value["$lit"], str):
                env[f"c{i}"] = value["$lit"]
                lines.append(f"    out[{k}] = c{i}")
            elif value is None:
                continue
            elif isinstance(value, (bool, int, float)):
                env[f"c{i}"] = value
                lines.append(f"    out[{k}] = c{i}")
            else:
                env[f"f{i}"] = self.compile(value, node, key)
                lines.append(f"    v = f{i}(scope)")
                lines.append(f"    if v is not None: out[{k}] = None if v is NULL else v")
        lines.append("    return out")
        filename = f"<template {self.where(node)}>"
        if self.fast:
            # The server runs the generated Python of the whole template (engine/codegen.py):
            # this closure is only a fallback, compiled if it is ever called.
            def lazy(scope):
                if "build" not in env:
                    exec(compile("\n".join(lines), filename, "exec"), env)  # noqa: S102
                return env["build"](scope)
            return lazy
        exec(compile("\n".join(lines), filename, "exec"), env)  # noqa: S102 - generated from rule keys only
        return env["build"]

    def _list(self, node: list) -> Fn:
        fns = [self.compile(item, node, i) for i, item in enumerate(node)]
        return lambda scope: [v for v in (fn(scope) for fn in fns) if v is not None]

    def ref(self, name: str) -> Fn:
        """The compiled named template; compiled once (``$ref`` resolves lazily, so recursion is fine)."""
        fn = self.named.get(name)
        if fn is None:
            _, body = template_params(self.named_src[name])
            fn = self.named[name] = self.compile(body, self.named_src, name)
        return fn


def template_params(src) -> tuple[tuple[str, ...] | None, object]:
    """A named template is a template, or ``{params: [names], body: template}``: one whose
    inputs are declared; a ``$ref`` passes them in ``$args`` (an input not passed is null)."""
    if isinstance(src, dict) and set(src) == {"params", "body"} and isinstance(src["params"], list):
        return tuple(str(p) for p in src["params"]), src["body"]
    return None, src


def _located(fn: Fn, where: str) -> Fn:
    def run(scope):
        try:
            return fn(scope)
        except TranslationError as err:
            if err.rule is None:
                err.rule = where
            raise
        except (TypeError, ValueError, AttributeError, KeyError, IndexError) as err:
            raise scope.run.error_class(f"malformed payload ({type(err).__name__})", scope.param(), where) from err
    return run


class _Null:
    """A JSON null that is kept: object keys built from it stay, with value null."""

    def __repr__(self):
        return "NULL"


NULL = _Null()


class _Miss:
    def __repr__(self):
        return "MISS"


_MISS = _Miss()


def __getattr__(name):
    # The construct table lives in engine.registry (which imports this module).
    if name in ("CONSTRUCTS", "OPTIONS"):
        from . import registry

        return registry.CONSTRUCTS if name == "CONSTRUCTS" else {n: tuple(c.options) for n, c in registry.CONSTRUCTS.items()}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
