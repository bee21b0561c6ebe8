"""Selectors: jmespath expressions, compiled once at load.

A selector is evaluated against the current data item. ``$name.rest`` evaluates
``rest`` against the variable ``name`` instead (``$root``, ``$ctx``, ``$state``,
``$parent``, ``$index`` or one bound by ``$let``); a bare ``$name`` is the variable.
Plain dotted field paths skip jmespath entirely: they are the common case and a
dict lookup chain is several times faster.
"""
from __future__ import annotations

import json
import math
import re

import jmespath
from jmespath import functions as jp_functions

from .errors import RuleError

_VAR = re.compile(r"^\$([A-Za-z_]\w*)(?:\.(.+))?$", re.S)
_FIELD_PATH = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")


class _Functions(jp_functions.Functions):
    @jp_functions.signature({"types": ["string"]}, {"types": ["string"]})
    def _func_split(self, text, sep):
        return text.split(sep)

    @jp_functions.signature({"types": ["string", "null"]})
    def _func_lower(self, text):
        return text.lower() if text is not None else None


OPTIONS = jmespath.Options(custom_functions=_Functions())


def _field_getter(parts):
    if len(parts) == 1:
        key = parts[0]

        def get(value):
            return value.get(key) if isinstance(value, dict) else None
        return get

    def get_path(value):
        for key in parts:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        return value
    return get_path


def _compile_selector(text: str, where: str):
    if text == "@":
        return lambda value: value
    if _FIELD_PATH.match(text):
        return _field_getter(text.split("."))
    try:
        compiled = jmespath.compile(text)
    except jmespath.exceptions.JMESPathError as err:
        raise RuleError(f"bad jmespath expression {text!r}: {err}".replace("\n", " "), *_split(where)) from err
    try:
        return _closure(checked(compiled.parsed))
    except _Unsupported:
        return lambda value: compiled.search(value, OPTIONS)


# --- jmespath AST -> Python closures ---------------------------------------------------
# The jmespath interpreter walks its AST with a fresh visitor per search; rules run
# per stream event, so the common node types are compiled into closures once, with
# jmespath's own semantics. Anything else falls back to jmespath.


class _Unsupported(Exception):
    pass


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _equals(x, y) -> bool:
    # jmespath: true != 1 although Python says otherwise.
    if isinstance(x, bool) != isinstance(y, bool) and (_is_number(x) or _is_number(y)):
        return False
    return x == y


def _order(op):
    def compare(x, y):
        if _is_number(x) and _is_number(y):
            return op(x, y)
        return None
    return compare


_COMPARATORS = {
    "eq": _equals,
    "ne": lambda x, y: not _equals(x, y),
    "lt": _order(lambda x, y: x < y),
    "gt": _order(lambda x, y: x > y),
    "lte": _order(lambda x, y: x <= y),
    "gte": _order(lambda x, y: x >= y),
}


def _type_name(x) -> str:
    if x is None:
        return "null"
    if isinstance(x, bool):
        return "boolean"
    if isinstance(x, str):
        return "string"
    if isinstance(x, (int, float)):
        return "number"
    if isinstance(x, list):
        return "array"
    if isinstance(x, dict):
        return "object"
    raise _Unsupported


def _fn_length(x):
    if isinstance(x, (str, list, dict)):
        return len(x)
    raise TypeError("length() of a non-collection")


def _fn_contains(subject, search):
    if isinstance(subject, (str, list)):
        return search in subject
    raise TypeError("contains() on a non-collection")


def _fn_starts_with(subject, prefix):
    if isinstance(subject, str) and isinstance(prefix, str):
        return subject.startswith(prefix)
    raise TypeError("starts_with() on a non-string")


def _fn_ends_with(subject, suffix):
    if isinstance(subject, str) and isinstance(suffix, str):
        return subject.endswith(suffix)
    # the error jmespath raises (its name is in the malformed-payload message)
    bad = subject if not isinstance(subject, str) else suffix
    raise jmespath.exceptions.JMESPathTypeError("ends_with", bad, type(bad).__name__, ["string"])


def _fn_join(sep, items):
    if isinstance(sep, str) and isinstance(items, list):
        for item in items:
            if not isinstance(item, str):
                break
        else:
            return sep.join(items)
    raise TypeError("join() needs a string and an array of strings")


def _fn_to_string(x):
    if isinstance(x, str):
        return x
    if type(x) is int:  # the common case (an index): what json.dumps writes, without it
        return str(x)
    return json.dumps(x, separators=(",", ":"))


def _fn_floor(x):
    if _is_number(x):
        return math.floor(x)
    raise TypeError("floor() of a non-number")


def _fn_split(text, sep):
    if isinstance(text, str) and isinstance(sep, str):
        return text.split(sep)
    raise TypeError("split() needs strings")


_FUNCTIONS = {"length": _fn_length, "type": _type_name, "contains": _fn_contains, "starts_with": _fn_starts_with, "ends_with": _fn_ends_with,
              "join": _fn_join, "to_string": _fn_to_string, "floor": _fn_floor, "split": _fn_split}


def _kinds(node):
    yield node["type"]
    for child in node.get("children") or ():
        yield from _kinds(child)


def checked(parsed):
    """``parsed``, or _Unsupported: a flatten (``a[]``) with a function call is left to
    jmespath, whose own type errors such selectors have always raised."""
    kinds = set(_kinds(parsed))
    if "flatten" in kinds and "function_expression" in kinds:
        raise _Unsupported
    return parsed


def _closure(node):
    kind = node["type"]
    children = node.get("children") or []
    if kind == "field":
        key = node["value"]
        return lambda v: v.get(key) if isinstance(v, dict) else None
    if kind in ("identity", "current"):
        return lambda v: v
    if kind == "literal":
        value = node["value"]
        return lambda v: value
    if kind == "pipe":
        left, right = _closure(children[0]), _closure(children[1])
        return lambda v: right(left(v))
    if kind == "subexpression":
        # a.b[0].c parses as one subexpression with every step as a child
        steps = [_closure(c) for c in children]

        def chain(v):
            for step in steps:
                if v is None:
                    return None
                v = step(v)
            return v
        return chain
    if kind == "index":
        i = node["value"]

        def at(seq):
            if not isinstance(seq, list):
                return None
            try:
                return seq[i]
            except IndexError:
                return None
        return at
    if kind == "flatten":  # a[]: one level of nested lists spliced
        inner = _closure(children[0])

        def flatten(v):
            base = inner(v)
            if not isinstance(base, list):
                return None
            out = []
            for item in base:
                if isinstance(item, list):
                    out.extend(item)
                else:
                    out.append(item)
            return out
        return flatten
    if kind == "index_expression":
        # a[0][1] is one index_expression: the base, then each index in turn
        steps = [_closure(c) for c in children]

        def index_chain(v):
            for step in steps:
                v = step(v)
            return v
        return index_chain
    if kind == "comparator":
        op = _COMPARATORS[node["value"]]
        left, right = _closure(children[0]), _closure(children[1])
        return lambda v: op(left(v), right(v))
    if kind == "and_expression":
        left, right = _closure(children[0]), _closure(children[1])

        def both(v):
            first = left(v)
            return first if not truthy(first) else right(v)
        return both
    if kind == "or_expression":
        left, right = _closure(children[0]), _closure(children[1])

        def either(v):
            first = left(v)
            return first if truthy(first) else right(v)
        return either
    if kind == "not_expression":
        inner = _closure(children[0])
        return lambda v: not truthy(inner(v))
    if kind in ("projection", "filter_projection"):
        left, right = _closure(children[0]), _closure(children[1])
        cond = _closure(children[2]) if kind == "filter_projection" else None

        def project(v):
            items = left(v)
            if not isinstance(items, list):
                return None
            out = []
            for item in items:
                if cond is not None and not truthy(cond(item)):
                    continue
                value = right(item)
                if value is not None:
                    out.append(value)
            return out
        return project
    if kind == "multi_select_list":
        items = [_closure(c) for c in children]
        return lambda v: None if v is None else [item(v) for item in items]
    if kind == "function_expression" and node["value"] in _FUNCTIONS:
        fn = _FUNCTIONS[node["value"]]
        args = [_closure(c) for c in children]
        if len(args) == 1:
            only = args[0]
            return lambda v: fn(only(v))
        return lambda v: fn(*(a(v) for a in args))
    raise _Unsupported


def _split(where: str):
    file, _, line = where.rpartition(":")
    return file or None, int(line) if line.isdigit() else None


def compile_expr(text: str, where: str):
    """Compile a selector into ``fn(scope) -> value``."""
    match = _VAR.match(text)
    if match is None:
        if _FIELD_PATH.match(text) and "." not in text:
            key = text

            def field(scope):
                cur = scope.cur
                return cur.get(key) if isinstance(cur, dict) else None
            return field
        get = _compile_selector(text, where)
        return lambda scope: get(scope.cur)
    name, rest = match.groups()
    if rest is None:
        return lambda scope: scope.vars.get(name)
    get = _compile_selector(rest, where)
    return lambda scope: get(scope.vars.get(name))


def variables_of(text: str) -> str | None:
    match = _VAR.match(text)
    return match.group(1) if match else None


def truthy(value) -> bool:
    """jmespath truthiness: false, null and empty string/list/object are false; numbers are true."""
    if value is None or value is False:
        return False
    if isinstance(value, (str, list, dict, tuple)):
        return len(value) > 0
    return True
