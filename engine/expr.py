"""Selectors: jmespath expressions, checked at load and generated as Python by
:mod:`engine.codegen` (the one evaluator of selectors).

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

VAR = re.compile(r"^\$([A-Za-z_]\w*)(?:\.(.+))?$", re.S)
FIELD_PATH = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*$")


class _Functions(jp_functions.Functions):
    @jp_functions.signature({"types": ["string"]}, {"types": ["string"]})
    def _func_split(self, text, sep):
        return text.split(sep)

    @jp_functions.signature({"types": ["string", "null"]})
    def _func_lower(self, text):
        return text.lower() if text is not None else None


OPTIONS = jmespath.Options(custom_functions=_Functions())


def check(text: str, where: str) -> None:
    """A RuleError at ``where`` unless ``text`` is a selector."""
    match = VAR.match(text)
    text = match.group(2) if match is not None else text
    if text is None or text == "@" or FIELD_PATH.match(text):
        return
    try:
        jmespath.compile(text)
    except jmespath.exceptions.JMESPathError as err:
        raise RuleError(f"bad jmespath expression {text!r}: {err}".replace("\n", " "), *_split(where)) from err


# --- what generated selectors call -------------------------------------------------------
# engine/codegen.py turns a selector's jmespath AST into Python statements, with
# jmespath's semantics; these are the comparisons and functions those statements call.
# An AST it does not generate calls jmespath's own search.


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


def _split(where: str):
    file, _, line = where.rpartition(":")
    return file or None, int(line) if line.isdigit() else None


def variables_of(text: str) -> str | None:
    match = VAR.match(text)
    return match.group(1) if match else None


def truthy(value) -> bool:
    """jmespath truthiness: false, null and empty string/list/object are false; numbers are true."""
    if value is None or value is False:
        return False
    if isinstance(value, (str, list, dict, tuple)):
        return len(value) > 0
    return True
