"""The registry of the template language: every construct and every hook, in one place.

The compiler (:mod:`engine.template`) checks each construct node against its entry
here before compiling it; the linter runs that compiler, so it cannot disagree
with it; and the template part of ``schemas/rules.schema.json`` is generated from
:data:`CONSTRUCTS` (``proxai lint --write-schema``; a test fails when they drift).

A construct is a mapping whose first ``$`` key names it (``{$map: xs, $as: ...}``);
its other ``$`` keys are its options. Each entry says what the construct key and
each option hold, as one of the :data:`KINDS`.

v1 idioms (a jmespath literal as a whole selector, ``$reject``/``$error``, a
``$switch`` case ``"None"``, the ``responses.nulls`` hook) are load and lint errors
saying what to write instead; ``proxai migrate-rules`` rewrites them.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Callable

import jmespath

from . import constructs as c
from .hooks import HOOKS
from .template import Compiler, Fn

#: what a construct key or option holds -> its JSON Schema
KINDS: dict[str, dict] = {
    "template": {"$ref": "#/$defs/template"},
    "templates": {"type": "array", "items": {"$ref": "#/$defs/template"}},
    "cases": {"type": "object", "additionalProperties": {"$ref": "#/$defs/template"}},
    "bindings": {"type": "object", "propertyNames": {"pattern": "^[A-Za-z_]\\w*$"}, "additionalProperties": {"$ref": "#/$defs/template"}},
    "name": {"type": "string", "minLength": 1},
    "text": {"type": "string"},
    "flag": {"type": "boolean"},
    "value": {},
}

_PYTHON_TYPES = {"templates": list, "cases": dict, "bindings": dict, "name": str, "text": str, "flag": bool}


@dataclass(frozen=True)
class Construct:
    name: str
    compile: Callable[[Compiler, dict], Fn]
    holds: str                                       # kind of the construct key's value
    options: dict = field(default_factory=dict)      # option -> kind
    fallible: bool = False                           # can fail at run time (gets the rule location)
    summary: str = ""


CONSTRUCTS: dict[str, Construct] = {
    "$lit": Construct("$lit", c.compile_lit, "value",
                      summary="a literal value (write the YAML tag: `type: !lit function`)"),
    "$nullable": Construct("$nullable", c.compile_nullable, "template",
                           summary="the key is always sent: the template's value, or null (`{$nullable: null}` for always null)"),
    "$map": Construct("$map", c.compile_map, "template", {"$as": "template", "$where": "template", "$flat": "flag"}, True,
                      summary="each item of a list through `$as` (default `@`), kept when `$where` holds; `$flat` splices list results"),
    "$switch": Construct("$switch", c.compile_switch, "template", {"$cases": "cases", "$default": "template", "$what": "text"}, True,
                         summary="the case whose key is the value (`null`, `true`, `false` or its text); no match and no `$default` fails, naming `$what`"),
    "$if": Construct("$if", c.compile_if, "template", {"$then": "template", "$else": "template"},
                     summary="`$then` when the condition is truthy, else `$else` (absent: nothing)"),
    "$first": Construct("$first", c.compile_first, "templates", summary="the first non-null of a list of templates"),
    "$table": Construct("$table", c.compile_table, "name", {"$of": "template", "$default": "template"}, True,
                        summary="look `$of` (default `@`) up in a value table from rules/tables; a miss without `$default` fails"),
    "$hook": Construct("$hook", c.compile_hook, "name", {"$args": "bindings"}, True,
                       summary="call a registered Python hook with `$args` (name -> template)"),
    "$fail": Construct("$fail", c.compile_fail, "text", {"$param": "name"}, True,
                       summary="fail with this message (`{param}` is the client's field, `$param` a sub-field): 400 on requests, 502 on responses and streams"),
    "$ref": Construct("$ref", c.compile_ref, "name", {"$args": "bindings"},
                      summary="a named template of the same file (`templates:`); `$args` passes the parameters it declares (`{params: [..], body: T}`)"),
    "$merge": Construct("$merge", c.compile_merge, "templates", summary="objects merged left to right"),
    "$concat": Construct("$concat", c.compile_concat, "templates", summary="lists concatenated (a non-list item is appended)"),
    "$let": Construct("$let", c.compile_let, "bindings", {"$in": "template"},
                      summary="bind variables (`$name`) for `$in`"),
}

#: v1 constructs -> what to write instead
RETIRED: dict[str, str] = {
    "$reject": "write $fail (same message; $param stays)",
    "$error": "write $fail (same message)",
}

#: v1 hooks -> what to write instead
RETIRED_HOOKS: dict[str, str] = {
    "responses.nulls": "write each key as `key: {$nullable: null}`",
}


@dataclass
class V1Idiom:
    """A v1 idiom found in a rule file: ``old`` text, the ``value`` it stood for,
    the v2 ``replacement`` text and why. ``where`` is set when it is recorded."""

    old: str
    value: object
    replacement: str
    why: str = ""
    where: str = ""

    def message(self) -> str:
        return f"write {self.replacement}" + (f" ({self.why})" if self.why else "")


_RAW = re.compile(r"^'([^'\\]*)'$")
_JSON = re.compile(r"^`([^`\\]*)`$")
# A string YAML reads back as the same string when written plain.
_PLAIN_SAFE = re.compile(r"^[A-Za-z_/][\w.\-/ ]*$")
_YAML_SPECIAL = re.compile(r"^(?:null|Null|NULL|~|true|True|TRUE|false|False|FALSE|yes|no|on|off|y|n)$", re.I)


def yaml_scalar(text: str) -> str:
    """``text`` as a YAML scalar that loads back as exactly that string."""
    if _PLAIN_SAFE.match(text) and not _YAML_SPECIAL.match(text) and not text.endswith(" ") and ": " not in text and " #" not in text:
        return text
    return json.dumps(text, ensure_ascii=False)


def v1_literal(text: str) -> V1Idiom | None:
    """A selector that is only a jmespath literal (``'text'``, `` `null` ``) is v1."""
    match = _RAW.match(text)
    if match is not None:
        return V1Idiom(text, match.group(1), f"!lit {yaml_scalar(match.group(1))}")
    match = _JSON.match(text)
    if match is not None:
        try:
            value = jmespath.compile(text).parsed["value"]
        except (jmespath.exceptions.JMESPathError, KeyError):
            return None
        if value is None:
            return V1Idiom(text, None, "null")
        if isinstance(value, (bool, int, float)):
            return V1Idiom(text, value, json.dumps(value))
        if isinstance(value, str):
            return V1Idiom(text, value, f"!lit {yaml_scalar(value)}")
        return V1Idiom(text, value, f"!lit {json.dumps(value, ensure_ascii=False)}")
    return None


def construct_problem(node: dict):
    """What is wrong with a construct node, as ``(problem, key)``, or None. The compiler
    raises it; the loader words a schema error inside a template with it."""
    keys = [k for k in node if isinstance(k, str) and k.startswith("$")]
    if not keys:
        return None
    name = next((k for k in keys if k in CONSTRUCTS), None)
    if name is None:
        if any(k in RETIRED for k in keys):
            return None
        return f"unknown construct {keys[0]!r} (known: {', '.join(sorted(CONSTRUCTS))})", keys[0]
    entry = CONSTRUCTS[name]
    extra = [k for k in node if k != name and k not in entry.options]
    if extra:
        return f"{name} does not take {', '.join(map(str, extra))}", extra[0]
    for key in (name, *entry.options):
        if key in node:
            kind = entry.holds if key == name else entry.options[key]
            want = _PYTHON_TYPES.get(kind)
            if want is not None and node[key] is not None and not isinstance(node[key], want):
                return f"{key} takes {_KIND_WORDS[kind]}, not {type(node[key]).__name__}", key
    return None


def construct_of(compiler: Compiler, node: dict) -> Construct:
    """The registry entry of a construct node, after checking the node's keys and shapes."""
    problem = construct_problem(node)
    if problem is not None:
        raise compiler.error(node, *problem)
    name = next((k for k in node if k in CONSTRUCTS), None)
    if name is None:
        retired = next(k for k in node if k in RETIRED)
        compiler.v1(node, retired, V1Idiom(retired, None, "$fail", RETIRED[retired].partition("(")[2].rstrip(")")))
        return _retired(retired)
    if name == "$hook" and node["$hook"] in RETIRED_HOOKS:
        compiler.v1(node, "$hook", V1Idiom(node["$hook"], None, RETIRED_HOOKS[node["$hook"]].removeprefix("write ")))
        return Construct("$hook", _compile_nulls, "name", {"$args": "bindings"})
    return CONSTRUCTS[name]


def _compile_nulls(compiler, node):
    # v1 `responses.nulls` (legacy files only): {key: null} for each key, to merge under an object.
    args = node.get("$args") or {}
    keys = compiler.compile(args.get("keys"), args, "keys")
    return lambda scope: {k: None for k in keys(scope) or ()}


_KIND_WORDS = {"templates": "a list of templates", "cases": "a mapping of cases", "bindings": "a mapping of names to templates",
               "name": "a name", "text": "a text", "flag": "true or false"}


def _retired(name: str) -> Construct:
    # v1 $reject / $error, compiled as $fail with the class the v1 construct raised.
    from .errors import InvalidRequest, UpstreamProtocolError
    error_class = InvalidRequest if name == "$reject" else UpstreamProtocolError

    def compile_retired(compiler, node):
        message, sub = str(node[name]), node.get("$param")

        def run(scope):
            raise error_class(message, scope.param(sub))
        return run
    return Construct(name, compile_retired, "text", {"$param": "name"}, True)


def children(node):
    """``(template, parent, key, names_bound)`` for every template directly inside ``node``,
    read off the registry's kinds (names, texts and flags are not templates; a ``$lit``
    has none). ``names_bound`` are the variables the construct binds for that child
    (``$map``: parent and index in ``$as``/``$where``; ``$let``: its names in ``$in``).
    Walkers over the template language (free variables, selectors) use this, not lists
    of their own."""
    if isinstance(node, list):
        for i, item in enumerate(node):
            yield item, node, i, ()
        return
    if not isinstance(node, dict):
        return
    name = next((k for k in node if isinstance(k, str) and k.startswith("$") and k in CONSTRUCTS), None)
    if name is None:
        if not any(isinstance(k, str) and k.startswith("$") for k in node):
            for key, value in node.items():
                yield value, node, key, ()
        return
    entry = CONSTRUCTS[name]
    for key in (name, *entry.options):
        if key not in node:
            continue
        kind = entry.holds if key == name else entry.options[key]
        bound = ("parent", "index") if name == "$map" and key in ("$as", "$where") else \
            tuple(node["$let"] or ()) if name == "$let" and key == "$in" else ()
        value = node[key]
        if kind == "template":
            yield value, node, key, bound
        elif kind == "templates" and isinstance(value, list):
            for i, item in enumerate(value):
                yield item, value, i, bound
        elif kind in ("cases", "bindings") and isinstance(value, dict):
            for k, v in value.items():
                yield v, value, k, bound


# --- the template schema --------------------------------------------------------------

TEMPLATE_SCHEMA_ID = "https://proxai.dev/schemas/templates.schema.json"


def template_schema() -> dict:
    """schemas/templates.schema.json: the template language, generated from CONSTRUCTS
    (``proxai lint --write-schema``); rules.schema.json refers to it for every template."""
    names = sorted(CONSTRUCTS)
    # Keywords that apply to one JSON type only, so that no branch is evaluated twice:
    # items (lists), patternProperties (an object's plain keys), dependentSchemas (a construct).
    defs: dict = {
        "template": {
            "description": "a selector string, a number, boolean or null, an object or list of templates, or a $construct",
            "items": {"$ref": "#/$defs/template"},
            "patternProperties": {"^[^$]": {"$ref": "#/$defs/template"}},
            "dependentSchemas": {name: {"$ref": f"#/$defs/construct{name}"} for name in names},
            "propertyNames": {"if": {"pattern": "^\\$"}, "then": {"enum": sorted({k for e in CONSTRUCTS.values() for k in (e.name, *e.options)} | set(RETIRED) | {"$param"})}},
        },
    }
    for name in names:
        entry = CONSTRUCTS[name]
        props = {name: KINDS[entry.holds], **{k: KINDS[v] for k, v in entry.options.items()}}
        defs[f"construct{name}"] = {"description": entry.summary, "type": "object",
                                    "properties": props, "additionalProperties": False}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": TEMPLATE_SCHEMA_ID,
        "title": "ProxAI rule template",
        "description": "Generated from engine/registry.py by `proxai lint --write-schema`; do not edit.",
        "$ref": "#/$defs/template",
        "$defs": defs,
    }
