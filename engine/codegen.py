"""Templates compiled to Python source: one generated function per template tree,
the one way rules run.

:class:`engine.template.Compiler` checks a template (the registry pass the linter runs
too) before it comes here, so this module trusts its input. The checked tree becomes a
single Python function in which constructs, selectors and objects are inlined as
statements over local variables (the current item, the variables dict, the data path),
so evaluating a template costs no ``Scope`` per node, no call per node and no
variables-dict merge per ``$map`` item. A ``Scope`` is built only where a hook or a
failure needs one.

Selectors: a plain field path or ``$var.path`` is a chain of dict lookups; any other
selector's jmespath AST is generated as statements with jmespath's semantics, and the
few shapes not generated call jmespath's own search (compiled once, at load).

Errors keep their provenance: each fallible construct's code sits in a ``try`` that
attaches the rule's ``file:line`` to a failure from inside it (the innermost fallible
construct's; a malformed payload is reported with the data path), and failures name
the client's field through :meth:`Scope.fail`.
"""
from __future__ import annotations

import linecache
import re

import jmespath

from . import expr as _expr
from . import registry
from .errors import InvalidRequest, TranslationError, UpstreamProtocolError
from .registry import template_params
from .scope import MISS, NULL, Scope

_VAR_PATH = re.compile(r"^\$([A-Za-z_]\w*)((?:\.[A-Za-z_]\w*)*)$")
_CONTAINERS = (str, list, dict, tuple)
_MALFORMED = (TypeError, ValueError, AttributeError, KeyError, IndexError)
# Python refuses more than 20 statically nested blocks; a subtree deeper than this
# becomes a function of its own.
_MAX_DEPTH = 12


def _malformed(scope, path, where, err):
    return scope.run.error_class(f"malformed payload ({type(err).__name__})", path or None, where)


def _not_list(scope, cur, vars, path, items, sub):
    Scope(cur, vars, path, scope.ctx, scope.run).fail(f"expected a list, got {type(items).__name__}", sub)


def _unsupported(scope, cur, vars, path, label, key):
    Scope(cur, vars, path, scope.ctx, scope.run).fail(f"unsupported {label} {key!r}")


def _unknown(scope, cur, vars, path, table, key):
    Scope(cur, vars, path, scope.ctx, scope.run).fail(f"unknown {table.source} value {key!r}")


def fail(scope, message: str, sub: str | None = None, error_class=None):
    """``$fail``: a 400 naming the client's field on the request path, a 502 on the response
    and stream paths. ``{param}`` in the message is the field's name."""
    param = scope.param(sub)
    if "{param}" in message:
        message = message.replace("{param}", param or "the request")
    raise (error_class or scope.run.error_class)(message, param)


def switch_key(value) -> str:
    """The case key a value selects: ``null``, ``true``, ``false``, or the value as text."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


#: the state of a generated function: its item, variables, data path, and the item as a dict (or None)
_TOP = ("cur", "V", "P", "D")

_TRUTHY = "({0} is not None and {0} is not False and (not isinstance({0}, CONTAINERS) or len({0}) > 0))"


class Generator:
    """Generates the functions of one rule file's templates (after the compiler checked them)."""

    def __init__(self, compiler):
        self.c = compiler
        self.env: dict = {
            "Scope": Scope, "NULL": NULL, "MISS": MISS, "CONTAINERS": _CONTAINERS, "TranslationError": TranslationError,
            "MALFORMED": _MALFORMED, "malformed": _malformed, "not_list": _not_list, "unsupported": _unsupported,
            "unknown": _unknown, "switch_key": switch_key, "fail": fail, "OPTIONS": _expr.OPTIONS,
        }
        self.n = 0
        self.fresh: set = set()  # locals that hold a container just built: never None or NULL
        self.consts: set = set()  # names of rule literals (never NULL)
        self.bools: set = set()  # locals that hold a comparison's or a negation's result
        self.named: dict[str, list] = {}  # template name -> [fast fn] (a cell: $ref may recurse)

    # --- names and output ---------------------------------------------------------
    def new(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def const(self, value) -> str:
        if value is None or value is True or value is False:
            return repr(value)
        name = self.new("k")
        self.env[name] = value
        self.consts.add(name)
        return name

    # --- entry points -------------------------------------------------------------
    def template(self, node, parent=None, key=None):
        """``fn(scope)`` for a template (already checked by the compiler)."""
        fast = self.function(node, parent, key)
        return lambda scope: fast(scope.cur, scope.vars, scope.path, scope)

    def function(self, node, parent=None, key=None, where=None) -> object:
        """The generated ``fast(cur, V, P, scope)``: ``scope`` lends its ctx and run."""
        name = self.new("t")
        body: list[str] = []
        res = self.emit(node, _TOP, body, 1, parent, key)
        src = [f"def {name}(cur, V, P, scope):", *self.dict_view(_TOP, body, 1), *body, f"    return {res}"]
        if where is None:
            where = self.c.where(parent, key) if parent is not None else self.c.where(node)
        return self.define(name, src, f"<template {where}>")

    def first_true(self, conditions: list) -> object:
        """``fn(scope) -> i``: the first of ``(template, parent, key)`` conditions that holds, or -1."""
        name = self.new("q")
        body: list[str] = []
        for i, (node, parent, key) in enumerate(conditions):
            v = self.emit(node, _TOP, body, 1, parent, key)
            body.append(f"    if {self.truthy(v)}: return {i}")
        src = [f"def {name}(scope):", "    cur = scope.cur; V = scope.vars; P = scope.path", *self.dict_view(_TOP, body, 1),
               *body, "    return -1"]
        return self.define(name, src, f"<conditions {self.c.file}>")

    def transition(self, node, steps) -> object:
        """``fn(event, vars, scope, out) -> bool`` for a stream transition: False when its `when`
        does not hold. ``scope`` lends its ctx and run (its item and variables are not read).
        ``steps`` are (kind, value node, parent) triples as the transition checked them."""
        name = self.new("s")
        body: list[str] = []
        st = _TOP
        if "when" in node:
            w = self.emit(node["when"], st, body, 1, node, "when")
            body.append(f"    if not {self.truthy(w)}: return False")
        for kind, value in steps:
            if kind == "emit":
                items = value if isinstance(value, list) else [value]
                for i, item in enumerate(items):
                    v = self.emit(item, st, body, 1, value, i)
                    body.append(f"    if isinstance({v}, list): out.extend([x for x in {v} if x is not None])")
                    body.append(f"    elif {v} is not None: out.append({v})")
            elif kind in ("let", "set"):
                got = [(str(k), self.local(self.emit(v, st, body, 1, value, k), body, 1)) for k, v in value.items()]
                if kind == "let":
                    nv = self.new("V")
                    body.append(f"    {nv} = {{**V, " + ", ".join(f"{k!r}: {v}" for k, v in got) + "}")
                    body.append(f"    V = {nv}")
                else:
                    body.append("    state = V['state']")
                    for k, v in got:
                        body.append(f"    state[{k!r}] = {v}")
            else:
                self.emit(value, st, body, 1, node, "steps")
        src = [f"def {name}(cur, V, scope, out):", "    P = ''", *self.dict_view(st, body, 1), *body, "    return True"]
        return self.define(name, src, f"<transition {self.c.where(node)}>")

    @staticmethod
    def dict_view(st, body: list, ind: int) -> list:
        """The line that sets the state's dict view (the item, if a dict), when ``body`` reads it."""
        used = re.compile(rf"\b{st[3]}\b")
        if any(used.search(line) for line in body):
            return ["    " * ind + f"{st[3]} = {st[0]} if isinstance({st[0]}, dict) else None"]
        return []

    def define(self, name: str, src: list, filename: str):
        """Compile the generated function ``name``; its code object is named after the rule
        (``<template rules/x.yaml:12>``), and tracebacks show the generated lines."""
        text = "\n".join(src) + "\n"
        filename = f"{filename[:-1]} {name}>"
        linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
        exec(compile(text, filename, "exec"), self.env)  # noqa: S102 - generated from checked rules
        return self.env[name]

    def ref(self, name: str) -> list:
        cell = self.named.get(name)
        if cell is None:
            self.c.ref(name, observed=False)
            cell = self.named[name] = []
            _, body = template_params(self.c.named_src[name])
            cell.append(self.function(body, self.c.named_src, name))
        return cell

    def truthy(self, v: str) -> str:
        """The jmespath truthiness test of the value named ``v`` (a bool is its own)."""
        return v if v in self.bools else _TRUTHY.format(v)

    # --- code for one node --------------------------------------------------------
    def local(self, expr: str, out: list, ind: int) -> str:
        """``expr`` as a name evaluated once (a constant or local already is one)."""
        if expr.isidentifier():
            return expr
        r = self.new("r")
        out.append("    " * ind + f"{r} = {expr}")
        return r

    def branch(self, node, st, out: list, ind: int, r: str, parent, key) -> None:
        """``r = node`` as the body of the block just opened at ``ind``."""
        v = self.emit(node, st, out, ind + 1, parent, key)
        out.append("    " * (ind + 1) + f"{r} = {v}")

    def emit(self, node, st, out: list, ind: int, parent=None, key=None) -> str:
        """Append statements computing ``node`` to ``out``; return the expression of its value
        (a local name or a constant). ``st`` names the locals of the current item,
        variables dict and data path."""
        if ind > _MAX_DEPTH:
            fn = self.new("f")
            self.env[fn] = self.function(node, parent, key)
            r = self.new("r")
            out.append("    " * ind + f"{r} = {fn}({st[0]}, {st[1]}, {st[2]}, scope)")
            return r
        if isinstance(node, str):
            return self.selector(node, st, out, ind, parent, key)
        if isinstance(node, dict):
            if not any(isinstance(k, str) and k.startswith("$") for k in node):
                return self.object(node, st, out, ind)
            name = next((k for k in node if k in registry.CONSTRUCTS), None)
            if name is None:  # a v1 $reject / $error (legacy files only)
                name = next(k for k in node if k in registry.RETIRED)
                method = self.c_retired
            elif name == "$hook" and node["$hook"] in registry.RETIRED_HOOKS:
                method = self.c_nulls
            else:
                method = getattr(self, "c_" + name[1:])
                if not registry.CONSTRUCTS[name].fallible:
                    return method(node, st, out, ind)
            # A failure inside names this construct's rule (the innermost fallible one's).
            where = self.c.where(node)
            r = self.new("r")
            pad = "    " * ind
            out.append(pad + "try:")
            body: list[str] = []
            v = method(node, st, body, ind + 1)
            out.extend(body)
            out.append(pad + f"    {r} = {v}")
            out.append(pad + "except TranslationError as err:")
            out.append(pad + f"    if err.rule is None: err.rule = {where!r}")
            out.append(pad + "    raise")
            out.append(pad + "except MALFORMED as err:")
            out.append(pad + f"    raise malformed(scope, {st[2]}, {where!r}, err) from err")
            return r
        if isinstance(node, list):
            r = self.new("r")
            out.append("    " * ind + f"{r} = []")
            for i, item in enumerate(node):
                v = self.emit(item, st, out, ind, node, i)
                if v == "None":
                    continue
                out.append("    " * ind + (f"{r}.append({v})" if v in self.fresh else f"if {v} is not None: {r}.append({v})"))
            self.fresh.add(r)
            return r
        return self.const(node)

    @staticmethod
    def scope(st) -> str:
        return f"Scope({st[0]}, {st[1]}, {st[2]}, scope.ctx, scope.run)"

    def selector(self, text: str, st, out, ind, parent=None, key=None) -> str:
        pad = "    " * ind
        idiom = registry.v1_literal(text) if parent is not None else None
        if idiom is not None:  # a v1 jmespath literal (legacy files only): its value
            return self.const(idiom.value)
        if text == "@":
            return st[0]
        match = _VAR_PATH.match(text)
        if match is not None or _expr.FIELD_PATH.match(text):
            if match is not None:
                base, steps = f"{st[1]}.get({match.group(1)!r})", match.group(2).split(".")[1:]
                r = self.new("r")
                out.append(pad + f"{r} = {base}")
            else:
                first, *steps = text.split(".")
                r = self.new("r")
                out.append(pad + f"{r} = {st[3]}.get({first!r}) if {st[3]} is not None else None")
            for step in steps:
                out.append(pad + f"{r} = {r}.get({step!r}) if isinstance({r}, dict) else None")
            return r
        var = _expr.VAR.match(text)
        if var is not None:
            name, text = var.groups()
            base = self.local(f"{st[1]}.get({name!r})", out, ind)
        else:
            base = st[0]
        try:
            parsed = _expr.checked(jmespath.compile(text).parsed)
            body: list[str] = []
            r = self.jmespath(parsed, base, body, ind, st[3] if base == st[0] else None)
            out.extend(body)
            return r
        except _expr._Unsupported:
            fn, r = self.new("g"), self.new("r")
            self.env[fn] = jmespath.compile(text)
            out.append(pad + f"{r} = {fn}.search({base}, OPTIONS)")
            return r

    def jmespath(self, node, v: str, out: list, ind: int, view: str | None = None) -> str:
        """Statements for a jmespath AST node applied to the value named ``v``, with
        jmespath's semantics; _Unsupported for a node not generated."""
        pad = "    " * ind
        kind = node["type"]
        children = node.get("children") or []
        if kind == "field":
            r = self.new("r")
            out.append(pad + f"{r} = {v}.get({node['value']!r}) if isinstance({v}, dict) else None")
            return r
        if kind in ("identity", "current"):
            return v
        if kind == "literal":
            return self.const(node["value"])
        if kind == "pipe":
            return self.jmespath(children[1], self.jmespath(children[0], v, out, ind, view), out, ind)
        if kind == "subexpression" and all(c["type"] == "field" for c in children):
            # a.b.c: each step is null-safe by itself
            r = self.new("r")
            first, *rest = children
            out.append(pad + (f"{r} = {view}.get({first['value']!r}) if {view} is not None else None" if view
                              else f"{r} = {v}.get({first['value']!r}) if isinstance({v}, dict) else None"))
            for step in rest:
                out.append(pad + f"{r} = {r}.get({step['value']!r}) if isinstance({r}, dict) else None")
            return r
        if kind == "field" and view:
            r = self.new("r")
            out.append(pad + f"{r} = {view}.get({node['value']!r}) if {view} is not None else None")
            return r
        if kind == "subexpression":
            r = self.new("r")
            out.append(pad + f"{r} = {v}")
            for step in children:
                out.append(pad + f"if {r} is not None:")
                body: list[str] = []
                x = self.jmespath(step, r, body, ind + 1)
                out.extend(body)
                out.append(pad + f"    {r} = {x}")
            return r
        if kind == "index":
            r = self.new("r")
            i = node["value"]
            out.append(pad + f"{r} = {v}[{i}] if isinstance({v}, list) and {-i - 1 if i < 0 else i} < len({v}) else None")
            return r
        if kind == "flatten":
            base = self.local(self.jmespath(children[0], v, out, ind, view), out, ind)
            r, item = self.new("r"), self.new("x")
            out.append(pad + f"{r} = None")
            out.append(pad + f"if isinstance({base}, list):")
            out.append(pad + f"    {r} = []")
            out.append(pad + f"    for {item} in {base}:")
            out.append(pad + f"        if isinstance({item}, list): {r}.extend({item})")
            out.append(pad + f"        else: {r}.append({item})")
            self.fresh.discard(r)
            return r
        if kind == "index_expression":
            for step in children:
                v = self.jmespath(step, v, out, ind)
            return v
        if kind == "comparator":
            a = self.local(self.jmespath(children[0], v, out, ind, view), out, ind)
            b = self.local(self.jmespath(children[1], v, out, ind, view), out, ind)
            r = self.new("r")
            literal = [c["value"] for c in children if c["type"] == "literal"]
            if node["value"] in ("eq", "ne") and literal and (literal[0] is None or isinstance(literal[0], str)):
                # against a string or null, jmespath equality is Python's
                out.append(pad + f"{r} = {a} {'==' if node['value'] == 'eq' else '!='} {b}")
                self.bools.add(r)
            else:
                op = self.new("op")
                self.env[op] = _expr._COMPARATORS[node["value"]]
                out.append(pad + f"{r} = {op}({a}, {b})")
            return r
        if kind in ("and_expression", "or_expression"):
            r = self.new("r")
            first = self.jmespath(children[0], v, out, ind, view)
            out.append(pad + f"{r} = {first}")
            test = self.truthy(r)
            out.append(pad + (f"if {test}:" if kind == "and_expression" else f"if not {test}:"))
            body = []
            x = self.jmespath(children[1], v, body, ind + 1, view)
            out.extend(body)
            out.append(pad + f"    {r} = {x}")
            return r
        if kind == "not_expression":
            x = self.local(self.jmespath(children[0], v, out, ind, view), out, ind)
            r = self.new("r")
            out.append(pad + f"{r} = not {self.truthy(x)}")
            self.bools.add(r)
            return r
        if kind == "function_expression" and node["value"] == "to_string" and len(children) == 1:
            x = self.local(self.jmespath(children[0], v, out, ind, view), out, ind)
            fn, r = self.new("fn"), self.new("r")
            self.env[fn] = _expr._fn_to_string
            out.append(pad + f"{r} = {x} if type({x}) is str else str({x}) if type({x}) is int else {fn}({x})")
            return r
        if kind == "function_expression" and node["value"] in _expr._FUNCTIONS:
            fn = self.new("fn")
            self.env[fn] = _expr._FUNCTIONS[node["value"]]
            args = [self.local(self.jmespath(c, v, out, ind, view), out, ind) for c in children]
            r = self.new("r")
            out.append(pad + f"{r} = {fn}({', '.join(args)})")
            return r
        if kind in ("projection", "filter_projection"):
            items = self.local(self.jmespath(children[0], v, out, ind, view), out, ind)
            r, item = self.new("r"), self.new("x")
            out.append(pad + f"{r} = None")
            out.append(pad + f"if isinstance({items}, list):")
            out.append(pad + f"    {r} = []")
            out.append(pad + f"    for {item} in {items}:")
            if kind == "filter_projection":
                body: list[str] = []
                c = self.jmespath(children[2], item, body, ind + 2)
                out.extend(body)
                out.append(pad + f"        if not {self.truthy(c)}: continue")
            body = []
            x = self.jmespath(children[1], item, body, ind + 2)
            out.extend(body)
            out.append(pad + f"        if {x} is not None: {r}.append({x})")
            return r
        if kind == "multi_select_list":
            r = self.new("r")
            out.append(pad + f"{r} = None")
            out.append(pad + f"if {v} is not None:")
            body = []
            xs = [self.local(self.jmespath(c, v, body, ind + 1, view), body, ind + 1) for c in children]
            out.extend(body)
            out.append(pad + f"    {r} = [{', '.join(xs)}]")
            return r
        raise _expr._Unsupported

    def object(self, node: dict, st, out, ind) -> str:
        pad = "    " * ind
        o = self.new("o")
        out.append(pad + f"{o} = {{}}")
        for key, value in node.items():
            k = repr(key)
            idiom = registry.v1_literal(value) if isinstance(value, str) else None
            if idiom is not None:
                value = None if idiom.value is None else {"$lit": idiom.value}
            if value is None:
                continue
            if isinstance(value, str) and (_expr.FIELD_PATH.match(value) or _VAR_PATH.match(value)):
                v = self.selector(value, st, out, ind, node, key)
                out.append(pad + f"if {v} is not None: {o}[{k}] = {v}")
            elif isinstance(value, dict) and set(value) == {"$lit"} and isinstance(value["$lit"], str):
                out.append(pad + f"{o}[{k}] = {self.const(value['$lit'])}")
            elif isinstance(value, (bool, int, float)):
                out.append(pad + f"{o}[{k}] = {self.const(value)}")
            elif isinstance(value, dict) and len(value) == 1 and "$nullable" in value:
                # the key is always sent: the value, or null
                v = self.emit(value["$nullable"], st, out, ind, value, "$nullable")
                out.append(pad + f"{o}[{k}] = {v}" if v in self.fresh or v == "None" else pad + f"{o}[{k}] = None if {v} is NULL else {v}")
            else:
                v = self.emit(value, st, out, ind, node, key)
                if v in self.fresh:
                    out.append(pad + f"{o}[{k}] = {v}")
                elif v != "None":
                    out.append(pad + f"if {v} is not None: {o}[{k}] = None if {v} is NULL else {v}")
        self.fresh.add(o)
        return o

    # --- constructs (rules/README.md has the meaning of each) ---------------------
    def c_lit(self, node, st, out, ind) -> str:
        return self.const(node["$lit"])

    def c_nullable(self, node, st, out, ind) -> str:
        v = self.emit(node["$nullable"], st, out, ind, node, "$nullable")
        if v == "None":
            return "NULL"
        r = self.new("r")
        out.append("    " * ind + f"{r} = NULL if {v} is None else {v}")
        return r

    def c_map(self, node, st, out, ind) -> str:
        pad = "    " * ind
        source = node["$map"]
        simple = isinstance(source, str) and _expr.FIELD_PATH.match(source) is not None
        items = self.emit(source, st, out, ind, node, "$map")
        r, item, i, bound, path, value, prefix, annotate, view = (
            self.new(p) for p in ("r", "item", "i", "V", "P", "v", "pre", "ann", "D"))
        inner = (item, bound, path, view)
        out.append(pad + f"{r} = None")
        out.append(pad + f"if {items} is not None:")
        p1, p2 = pad + "    ", pad + "        "
        out.append(p1 + f"if not isinstance({items}, list): not_list(scope, {', '.join(st[:3])}, {items}, {source if simple else None!r})")
        out.append(p1 + f"{r} = []")
        if simple:
            out.append(p1 + f"{prefix} = f'{{{st[2]}}}.{source}[' if {st[2]} else {source + '[' !r}")
        out.append(p1 + f"{annotate} = scope.run.annotate_paths")
        # One variables dict for the whole list: items are evaluated one after the
        # other, and a nested $let or $map copies before it binds.
        out.append(p1 + f"{bound} = dict({st[1]}); {bound}['parent'] = {st[0]}")
        out.append(p1 + f"for {i}, {item} in enumerate({items}):")
        # an IR item decoded from the client's wire names its own field
        out.append(p2 + f"if not {annotate} and type({item}) is dict and '_path' in {item}: {path} = {item}['_path']")
        out.append(p2 + "else: " + (f"{path} = f'{{{prefix}}}{{{i}}}]'" if simple else f"{path} = {st[2]}"))
        out.append(p2 + f"{bound}['index'] = {i}")
        loop_at = len(out)
        if "$where" in node:
            w = self.emit(node["$where"], inner, out, ind + 2, node, "$where")
            out.append(p2 + f"if not {self.truthy(w)}: continue")
        v = self.emit(node.get("$as", "@"), inner, out, ind + 2, node, "$as")
        out.append(p2 + f"{value} = {v}")
        out.append(p2 + f"if {value} is None: continue")
        out.append(p2 + f"if {annotate} and type({value}) is dict and {value} is not {item} and '_path' not in {value}: {value}['_path'] = {path}")
        if node.get("$flat", False):
            out.append(p2 + f"if type({value}) is list:")
            out.append(p2 + f"    if {annotate}:")
            out.append(p2 + f"        for x in {value}:")
            out.append(p2 + f"            if type(x) is dict and x is not {item} and '_path' not in x: x['_path'] = {path}")
            out.append(p2 + f"    {r}.extend({value})")
            out.append(p2 + f"else: {r}.append({value})")
        else:
            out.append(p2 + f"{r}.append({value})")
        out[loop_at:loop_at] = self.dict_view(inner, out[loop_at:], ind + 2)
        return r

    def c_switch(self, node, st, out, ind) -> str:
        pad = "    " * ind
        k = self.emit(node["$switch"], st, out, ind, node, "$switch")
        cases_src = node.get("$cases") or {}
        cases: dict = {}
        for case, value in cases_src.items():
            cases[switch_key(case) if case != "None" else "null"] = (value, case)
        label = node.get("$what") or str(node["$switch"])
        sk, r = self.new("sk"), self.new("r")
        out.append(pad + f"{sk} = {k} if type({k}) is str else switch_key({k})")
        first = True
        for case, (value, src_key) in cases.items():
            out.append(pad + f"{'if' if first else 'elif'} {sk} == {case!r}:")
            first = False
            self.branch(value, st, out, ind, r, cases_src, src_key)
        out.append(pad + ("else:" if not first else "if True:"))
        if "$default" in node:
            self.branch(node["$default"], st, out, ind, r, node, "$default")
        else:
            out.append(pad + f"    {r} = unsupported(scope, {', '.join(st[:3])}, {self.const(label)}, {k})")
        return r

    def c_if(self, node, st, out, ind) -> str:
        pad = "    " * ind
        c = self.emit(node["$if"], st, out, ind, node, "$if")
        r = self.new("r")
        out.append(pad + f"if {self.truthy(c)}:")
        self.branch(node.get("$then"), st, out, ind, r, node, "$then")
        out.append(pad + "else:")
        self.branch(node.get("$else"), st, out, ind, r, node, "$else")
        return r

    def c_first(self, node, st, out, ind) -> str:
        # Flat, not nested: once a value is found the later tests skip the rest.
        items = node["$first"]
        r = self.new("r")
        pad = "    " * ind
        for i, item in enumerate(items):
            if i == 0:
                v = self.emit(item, st, out, ind, items, i)
                out.append(pad + f"{r} = {v}")
                continue
            out.append(pad + f"if {r} is None:")
            self.branch(item, st, out, ind, r, items, i)
        if not items:
            out.append(pad + f"{r} = None")
        return r

    def c_table(self, node, st, out, ind) -> str:
        pad = "    " * ind
        table = self.c.tables[node["$table"]]
        t = self.new("tab")
        self.env[t] = table
        k = self.emit(node.get("$of", "@"), st, out, ind, node, "$of")
        r = self.new("r")
        out.append(pad + f"{r} = None if {k} is None else {t}.lookup({k})")
        out.append(pad + f"if {r} is MISS:")
        if "$default" in node:
            self.branch(node["$default"], st, out, ind, r, node, "$default")
        else:
            out.append(pad + f"    unknown(scope, {', '.join(st[:3])}, {t}, {k})")
        return r

    def c_hook(self, node, st, out, ind) -> str:
        pad = "    " * ind
        hook = self.c.hooks[node["$hook"]]
        args_src = node.get("$args") or {}
        args = []
        for k, v in args_src.items():
            e = self.local(self.emit(v, st, out, ind, args_src, k), out, ind)
            args.append(f"{k}={e}" if e in self.fresh or e == "None" or e in self.consts else f"{k}=(None if {e} is NULL else {e})")
        r = self.new("r")
        method = getattr(hook, "method_of", None)
        if method is not None:
            # a stream state object's method: call it on the object, no Scope needed
            obj, name = method
            out.append(pad + f"{r} = {st[1]}['@objects'][{obj!r}].{name}({', '.join(args)})")
            return r
        h = self.new("h")
        self.env[h] = hook
        out.append(pad + f"{r} = {h}({', '.join([self.scope(st), *args])})")
        return r

    def c_fail(self, node, st, out, ind) -> str:
        out.append("    " * ind + f"fail({self.scope(st)}, {self.const(str(node['$fail']))}, {node.get('$param')!r})")
        return "None"

    def c_retired(self, node, st, out, ind) -> str:
        # v1 $reject / $error (legacy files only): $fail with the error class each raised,
        # and the message as written ({param} was not substituted in v1)
        name = "$reject" if "$reject" in node else "$error"
        cls = self.new("cls")
        self.env[cls] = InvalidRequest if name == "$reject" else UpstreamProtocolError
        out.append("    " * ind + f"raise {cls}({self.const(str(node[name]))}, {self.scope(st)}.param({node.get('$param')!r}))")
        return "None"

    def c_nulls(self, node, st, out, ind) -> str:
        # v1 hook `responses.nulls` (legacy files only): {key: null} for each key, to merge under an object
        args = node.get("$args") or {}
        keys = self.local(self.emit(args.get("keys"), st, out, ind, args, "keys"), out, ind)
        r = self.new("r")
        out.append("    " * ind + f"{r} = {{k: None for k in {keys} or ()}}")
        return r

    def c_ref(self, node, st, out, ind) -> str:
        pad = "    " * ind
        name = node["$ref"]
        params, _ = template_params(self.c.named_src[name])
        cell = self.new("cell")
        self.env[cell] = self.ref(name)
        r = self.new("r")
        if params is None:
            out.append(pad + f"{r} = {cell}[0]({', '.join(st[:3])}, scope)")
            return r
        given = node.get("$args") or {}
        got = [(k, self.local(self.emit(v, st, out, ind, given, k), out, ind)) for k, v in given.items()]
        bound = self.new("V")
        values = {p: "None" for p in params}
        values.update(got)
        out.append(pad + f"{bound} = {{**{st[1]}, " + ", ".join(f"{k!r}: {v}" for k, v in values.items()) + "}")
        out.append(pad + f"{r} = {cell}[0]({st[0]}, {bound}, {st[2]}, scope)")
        return r

    def c_merge(self, node, st, out, ind) -> str:
        pad = "    " * ind
        r = self.new("r")
        out.append(pad + f"{r} = {{}}")
        for i, item in enumerate(node["$merge"]):
            v = self.emit(item, st, out, ind, node["$merge"], i)
            out.append(pad + f"if {v}: {r}.update({v})")
        self.fresh.add(r)
        return r

    def c_concat(self, node, st, out, ind) -> str:
        pad = "    " * ind
        r = self.new("r")
        out.append(pad + f"{r} = []")
        for i, item in enumerate(node["$concat"]):
            v = self.emit(item, st, out, ind, node["$concat"], i)
            out.append(pad + f"if isinstance({v}, list): {r}.extend({v})")
            out.append(pad + f"elif {v} is not None: {r}.append({v})")
        self.fresh.add(r)
        return r

    def c_let(self, node, st, out, ind) -> str:
        pad = "    " * ind
        got = [(k, self.local(self.emit(v, st, out, ind, node["$let"], k), out, ind)) for k, v in node["$let"].items()]
        bound = self.new("V")
        out.append(pad + f"{bound} = {{**{st[1]}, " + ", ".join(f"{k!r}: {v}" for k, v in got) + "}")
        return self.emit(node.get("$in"), (st[0], bound, st[2], st[3]), out, ind, node, "$in")

