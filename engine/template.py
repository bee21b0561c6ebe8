"""Templates: the plain-data language rule files use to build one payload from another.

A template is YAML data:

* a string is a selector (see :mod:`engine.expr`); ``'text'`` (jmespath raw
  string) is a literal string;
* a number, boolean or null is itself;
* a mapping without ``$`` keys builds an object; keys whose value is null are left out;
* a list builds a list (null items left out);
* a mapping with a ``$`` key is a construct from :data:`CONSTRUCTS`, with its
  options as sibling ``$`` keys.

Each construct is one small function ``compile_x(compiler, node) -> fn(scope)``
registered in the literal table :data:`CONSTRUCTS`. The compiler, not the
construct, attaches the rule location to errors; :class:`Scope` carries the data
path so rejections name the client's field (``messages[2].content[1]``).
"""
from __future__ import annotations

import re
from typing import Any, Callable

from . import expr as _expr
from .errors import InvalidRequest, RuleError, TranslationError, UpstreamProtocolError
from .yamlsrc import Located

Fn = Callable[["Scope"], Any]

# A jmespath raw string literal with nothing to unescape: 'text'
_RAW_STRING = re.compile(r"^'[^'\\]*'$")
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
    """Compiles templates of one rule file; knows its hooks, tables and named templates."""

    def __init__(self, file: str, hooks: dict, tables: dict, named: dict | None = None):
        self.file, self.hooks, self.tables = file, hooks, tables
        self.named_src = named or {}
        self.named: dict[str, Fn] = {}

    def where(self, node, key=None) -> str:
        if isinstance(node, Located):
            return node.where(key)
        return f"{self.file}:{getattr(node, 'line', 0)}"

    def error(self, node, problem: str, key=None) -> RuleError:
        file, _, line = self.where(node, key).rpartition(":")
        return RuleError(problem, file, int(line) if line.isdigit() else None)

    def compile(self, node, where_node=None) -> Fn:
        if isinstance(node, str):
            return _expr.compile_expr(node, self.where(where_node) if where_node is not None else f"{self.file}:0")
        if isinstance(node, dict):
            constructs = [k for k in node if isinstance(k, str) and k.startswith("$")]
            if not constructs:
                return self._object(node)
            primary = next((k for k in constructs if k in CONSTRUCTS), None)
            if primary is None:
                raise self.error(node, f"unknown construct {constructs[0]!r} (known: {', '.join(sorted(CONSTRUCTS))})")
            allowed = {primary, *OPTIONS.get(primary, ())}
            extra = [k for k in constructs if k not in allowed]
            if extra:
                raise self.error(node, f"{primary} does not take {', '.join(extra)}", extra[0])
            fn = CONSTRUCTS[primary](self, node)
            # Only constructs that can fail get the (cheap, but per-call) error wrapper;
            # failures inside the others surface at the nearest wrapped one.
            return _located(fn, self.where(node)) if primary in _FALLIBLE else fn
        if isinstance(node, list):
            return self._list(node)
        return lambda scope, value=node: value

    def _object(self, node: dict) -> Fn:
        """An object template becomes one generated function: plain field paths and
        literals are inlined, other values call their compiled closures. Objects are
        the most common template node, and this saves a call per field."""
        env: dict = {"NULL": NULL}
        lines = ["def build(scope):", "    cur = scope.cur", "    d = cur if isinstance(cur, dict) else None", "    out = {}"]
        for i, (key, value) in enumerate(node.items()):
            k = repr(key)
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
            elif isinstance(value, str) and _RAW_STRING.match(value):
                env[f"c{i}"] = value[1:-1]
                lines.append(f"    out[{k}] = c{i}")
            elif value is None:
                continue
            elif isinstance(value, (bool, int, float)):
                env[f"c{i}"] = value
                lines.append(f"    out[{k}] = c{i}")
            else:
                env[f"f{i}"] = self.compile(value, node)
                lines.append(f"    v = f{i}(scope)")
                lines.append(f"    if v is not None: out[{k}] = None if v is NULL else v")
        lines.append("    return out")
        exec(compile("\n".join(lines), f"<template {self.where(node)}>", "exec"), env)  # noqa: S102 - generated from rule keys only
        return env["build"]

    def _list(self, node: list) -> Fn:
        fns = [self.compile(item, node) for item in node]
        return lambda scope: [v for v in (fn(scope) for fn in fns) if v is not None]

    def ref(self, name: str) -> Fn:
        """The compiled named template; compiled once (``$ref`` resolves lazily, so recursion is fine)."""
        fn = self.named.get(name)
        if fn is None:
            _, body = template_params(self.named_src[name])
            fn = self.named[name] = self.compile(body, self.named_src)
        return fn


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


# --- constructs -----------------------------------------------------------------


class _Null:
    """A JSON null that is kept: object keys built from it stay, with value null."""

    def __repr__(self):
        return "NULL"


NULL = _Null()


def compile_nullable(c: Compiler, node) -> Fn:
    fn = c.compile(node["$nullable"], node)

    def run(scope):
        value = fn(scope)
        return NULL if value is None else value
    return run


def compile_lit(c: Compiler, node) -> Fn:
    value = node["$lit"]
    return lambda scope: value


def compile_map(c: Compiler, node) -> Fn:
    source = node["$map"]
    get = c.compile(source, node)
    each = c.compile(node.get("$as", "@"), node)
    where = c.compile(node["$where"], node) if "$where" in node else None
    flat = bool(node.get("$flat", False))
    simple = isinstance(source, str) and _expr._FIELD_PATH.match(source) is not None

    def run(scope):
        items = get(scope)
        if items is None:
            return None
        if not isinstance(items, list):
            scope.fail(f"expected a list, got {type(items).__name__}", source if simple else None)
        out = []
        base = scope.path
        prefix = (f"{base}.{source}[" if base else f"{source}[") if simple else None
        annotate = scope.run.annotate_paths
        # One variables dict for the whole list: items are evaluated one after the
        # other, and a nested $let or $map copies before it binds.
        bound = dict(scope.vars)
        bound["parent"] = scope.cur
        ctx, run_ = scope.ctx, scope.run
        for i, item in enumerate(items):
            path = f"{prefix}{i}]" if prefix is not None else base
            if not annotate and type(item) is dict and "_path" in item:
                path = item["_path"]
            bound["index"] = i
            inner = Scope(item, bound, path, ctx, run_)
            if where is not None and not _expr.truthy(where(inner)):
                continue
            value = each(inner)
            if value is None:
                continue
            if annotate and type(value) is dict and value is not item and "_path" not in value:
                value["_path"] = path
            if flat and type(value) is list:
                if annotate:
                    for v in value:
                        if type(v) is dict and v is not item and "_path" not in v:
                            v["_path"] = path
                out.extend(value)
            else:
                out.append(value)
        return out
    return run


def compile_switch(c: Compiler, node) -> Fn:
    get = c.compile(node["$switch"], node)
    cases_src = node.get("$cases") or {}
    cases = {str(k): c.compile(v, cases_src) for k, v in cases_src.items()}
    default = c.compile(node["$default"], node) if "$default" in node else None
    label = node.get("$what") or str(node["$switch"])

    def run(scope):
        key = get(scope)
        fn = cases.get(_key(key))
        if fn is None:
            if default is None:
                scope.fail(f"unsupported {label} {key!r}")
            return default(scope)
        return fn(scope)
    return run


def _key(value) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


def compile_if(c: Compiler, node) -> Fn:
    cond = c.compile(node["$if"], node)
    then = c.compile(node.get("$then"), node)
    other = c.compile(node.get("$else"), node)
    return lambda scope: then(scope) if _expr.truthy(cond(scope)) else other(scope)


def compile_first(c: Compiler, node) -> Fn:
    fns = [c.compile(item, node) for item in node["$first"]]

    def run(scope):
        for fn in fns:
            value = fn(scope)
            if value is not None:
                return value
        return None
    return run


def compile_table(c: Compiler, node) -> Fn:
    name = node["$table"]
    table = c.tables.get(name)
    if table is None:
        raise c.error(node, f"unknown table {name!r}", "$table")
    of = c.compile(node.get("$of", "@"), node)
    default = c.compile(node["$default"], node) if "$default" in node else None

    def run(scope):
        key = of(scope)
        if key is None:
            return None
        hit = table.lookup(key)
        if hit is _MISS:
            if default is not None:
                return default(scope)
            scope.fail(f"unknown {table.source} value {key!r}")
        return hit
    return run


def compile_hook(c: Compiler, node) -> Fn:
    name = node["$hook"]
    hook = c.hooks.get(name)
    if hook is None:
        raise c.error(node, f"unknown hook {name!r}", "$hook")
    args = [(k, c.compile(v, node["$args"])) for k, v in (node.get("$args") or {}).items()]
    if not args:
        return lambda scope: hook(scope)
    return lambda scope: hook(scope, **{k: _plain(fn(scope)) for k, fn in args})


def _plain(value):
    return None if value is NULL else value


def compile_reject(c: Compiler, node) -> Fn:
    message = str(node["$reject"])
    sub = node.get("$param")

    def run(scope):
        raise InvalidRequest(message, scope.param(sub))
    return run


def compile_error(c: Compiler, node) -> Fn:
    message = str(node["$error"])
    return lambda scope: (_ for _ in ()).throw(UpstreamProtocolError(message, scope.param()))


def template_params(src) -> tuple[tuple[str, ...] | None, object]:
    """A named template is a template, or ``{params: [names], body: template}``: one whose
    inputs are declared; a ``$ref`` passes them in ``$args`` (an input not passed is null)."""
    if isinstance(src, dict) and set(src) == {"params", "body"} and isinstance(src["params"], list):
        return tuple(str(p) for p in src["params"]), src["body"]
    return None, src


def compile_ref(c: Compiler, node) -> Fn:
    name = node["$ref"]
    if name not in c.named_src:
        raise c.error(node, f"unknown template {name!r}", "$ref")
    params, _ = template_params(c.named_src[name])
    given = node.get("$args") or {}
    if given and not isinstance(given, dict):
        raise c.error(node, "$args of a $ref is a mapping: parameter -> template", "$args")
    unknown = [k for k in given if k not in (params or ())]
    if unknown:
        declared = f"its params are {', '.join(params)}" if params else "it declares no params"
        raise c.error(node, f"template {name!r} has no parameter {unknown[0]!r} ({declared})", "$args")
    args = [(k, c.compile(v, given)) for k, v in given.items()]
    cell: list = []

    if params is None:
        def run(scope):
            if not cell:
                cell.append(c.ref(name))
            return cell[0](scope)
        return run

    def run_with(scope):
        if not cell:
            cell.append(c.ref(name))
        bound = dict(scope.vars)
        for p in params:
            bound[p] = None
        for k, fn in args:
            bound[k] = fn(scope)
        return cell[0](Scope(scope.cur, bound, scope.path, scope.ctx, scope.run))
    return run_with


def compile_merge(c: Compiler, node) -> Fn:
    fns = [c.compile(item, node) for item in node["$merge"]]

    def run(scope):
        out = {}
        for fn in fns:
            value = fn(scope)
            if value:
                out.update(value)
        return out
    return run


def compile_concat(c: Compiler, node) -> Fn:
    fns = [c.compile(item, node) for item in node["$concat"]]

    def run(scope):
        out = []
        for fn in fns:
            value = fn(scope)
            if isinstance(value, list):
                out.extend(value)
            elif value is not None:
                out.append(value)
        return out
    return run


def compile_let(c: Compiler, node) -> Fn:
    binds = [(k, c.compile(v, node["$let"])) for k, v in node["$let"].items()]
    body = c.compile(node.get("$in"), node)

    def run(scope):
        bound = dict(scope.vars)
        for name, fn in binds:
            bound[name] = fn(scope)
        return body(Scope(scope.cur, bound, scope.path, scope.ctx, scope.run))
    return run


class _Miss:
    def __repr__(self):
        return "MISS"


_MISS = _Miss()

_FALLIBLE = frozenset({"$map", "$switch", "$table", "$hook", "$reject", "$error"})

#: construct name -> compiler; options each construct accepts are in OPTIONS.
CONSTRUCTS: dict[str, Callable[[Compiler, dict], Fn]] = {
    "$lit": compile_lit,
    "$nullable": compile_nullable,
    "$map": compile_map,
    "$switch": compile_switch,
    "$if": compile_if,
    "$first": compile_first,
    "$table": compile_table,
    "$hook": compile_hook,
    "$reject": compile_reject,
    "$error": compile_error,
    "$ref": compile_ref,
    "$merge": compile_merge,
    "$concat": compile_concat,
    "$let": compile_let,
}

OPTIONS: dict[str, tuple[str, ...]] = {
    "$map": ("$as", "$where", "$flat"),
    "$switch": ("$cases", "$default", "$what"),
    "$if": ("$then", "$else"),
    "$table": ("$of", "$default"),
    "$hook": ("$args",),
    "$reject": ("$param",),
    "$let": ("$in",),
    "$ref": ("$args",),
}
