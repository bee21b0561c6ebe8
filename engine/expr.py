"""Selectors: jmespath expressions, compiled once at load.

A selector is evaluated against the current data item. ``$name.rest`` evaluates
``rest`` against the variable ``name`` instead (``$root``, ``$ctx``, ``$state``,
``$parent``, ``$index`` or one bound by ``$let``); a bare ``$name`` is the variable.
Plain dotted field paths skip jmespath entirely: they are the common case and a
dict lookup chain is several times faster.
"""
from __future__ import annotations

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
    return lambda value: compiled.search(value, OPTIONS)


def _split(where: str):
    file, _, line = where.rpartition(":")
    return file or None, int(line) if line.isdigit() else None


def compile_expr(text: str, where: str):
    """Compile a selector into ``fn(scope) -> value``."""
    match = _VAR.match(text)
    if match is None:
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
