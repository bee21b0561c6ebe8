"""The template constructs: one small function each, ``compile_x(compiler, node) -> fn(scope)``.

:mod:`engine.registry` lists them, with the options each takes, in its literal
table ``CONSTRUCTS``; the compiler has checked a node against that entry before
its function is called.
"""
from __future__ import annotations

from . import expr as _expr
from .template import _MISS, NULL, Compiler, Fn, Scope, template_params


def compile_nullable(c: Compiler, node) -> Fn:
    fn = c.compile(node["$nullable"], node, "$nullable")

    def run(scope):
        value = fn(scope)
        return NULL if value is None else value
    return run


def compile_lit(c: Compiler, node) -> Fn:
    value = node["$lit"]
    return lambda scope: value


def compile_map(c: Compiler, node) -> Fn:
    source = node["$map"]
    get = c.compile(source, node, "$map")
    c.depth += 1
    try:
        each = c.compile(node.get("$as", "@"), node, "$as")
        where = c.compile(node["$where"], node, "$where") if "$where" in node else None
    finally:
        c.depth -= 1
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


def switch_key(value) -> str:
    """The case key a value selects: ``null``, ``true``, ``false``, or the value as text."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


def compile_switch(c: Compiler, node) -> Fn:
    get = c.compile(node["$switch"], node, "$switch")
    cases_src = node.get("$cases") or {}
    cases = {}
    for k, v in cases_src.items():
        if k == "None":
            from .registry import V1Idiom
            c.v1(cases_src, k, V1Idiom("None", None, "null", "a $switch case for null is written null"))
        cases[switch_key(k) if k != "None" else "null"] = c.compile(v, cases_src, k)
    default = c.compile(node["$default"], node, "$default") if "$default" in node else None
    label = node.get("$what") or str(node["$switch"])

    def run(scope):
        key = get(scope)
        fn = cases.get(switch_key(key))
        if fn is None:
            if default is None:
                scope.fail(f"unsupported {label} {key!r}")
            return default(scope)
        return fn(scope)
    return run


def compile_if(c: Compiler, node) -> Fn:
    cond = c.compile(node["$if"], node, "$if")
    then = c.compile(node.get("$then"), node, "$then")
    other = c.compile(node.get("$else"), node, "$else")
    return lambda scope: then(scope) if _expr.truthy(cond(scope)) else other(scope)


def compile_first(c: Compiler, node) -> Fn:
    items = node["$first"]
    fns = [c.compile(item, items, i) for i, item in enumerate(items)]

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
    of = c.compile(node.get("$of", "@"), node, "$of")
    default = c.compile(node["$default"], node, "$default") if "$default" in node else None

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
    args_src = node.get("$args") or {}
    args = [(k, c.compile(v, args_src, k)) for k, v in args_src.items()]
    if not args:
        return lambda scope: hook(scope)
    return lambda scope: hook(scope, **{k: _plain(fn(scope)) for k, fn in args})


def _plain(value):
    return None if value is NULL else value


def compile_fail(c: Compiler, node) -> Fn:
    """Fail the translation: a 400 naming the client's field on the request path, a 502 on
    the response and stream paths. ``{param}`` in the message is the field's name."""
    message = str(node["$fail"])
    sub = node.get("$param")
    templated = "{param}" in message

    def run(scope):
        param = scope.param(sub)
        text = message.replace("{param}", param or "the request") if templated else message
        raise scope.run.error_class(text, param)
    return run


def compile_ref(c: Compiler, node) -> Fn:
    name = node["$ref"]
    if name not in c.named_src:
        raise c.error(node, f"unknown template {name!r}", "$ref")
    params, _ = template_params(c.named_src[name])
    given = node.get("$args") or {}
    unknown = [k for k in given if k not in (params or ())]
    if unknown:
        declared = f"its params are {', '.join(params)}" if params else "it declares no params"
        raise c.error(node, f"template {name!r} has no parameter {unknown[0]!r} ({declared})", "$args")
    args = [(k, c.compile(v, given, k)) for k, v in given.items()]
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
    items = node["$merge"]
    fns = [c.compile(item, items, i) for i, item in enumerate(items)]

    def run(scope):
        out = {}
        for fn in fns:
            value = fn(scope)
            if value:
                out.update(value)
        return out
    return run


def compile_concat(c: Compiler, node) -> Fn:
    items = node["$concat"]
    fns = [c.compile(item, items, i) for i, item in enumerate(items)]

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
    binds = [(k, c.compile(v, node["$let"], k)) for k, v in node["$let"].items()]
    body = c.compile(node.get("$in"), node, "$in")

    def run(scope):
        bound = dict(scope.vars)
        for name, fn in binds:
            bound[name] = fn(scope)
        return body(Scope(scope.cur, bound, scope.path, scope.ctx, scope.run))
    return run
