"""The registry of the template language: every construct and every hook, in one place.

The compiler (:mod:`engine.template`) checks each construct node against its entry
here (its keys and their shapes, then the entry's ``check``: one small function of
:mod:`engine.constructs`), then walks the templates inside it (:func:`children`); the
linter runs that compiler, so it cannot disagree with it; and the template part of
``schemas/rules.schema.json`` is generated from :data:`CONSTRUCTS` (``proxai lint
--write-schema``; a test fails when they drift). :mod:`engine.codegen` generates the
Python each construct runs as.

A construct is a mapping whose first ``$`` key names it (``{$map: xs, $as: ...}``);
its other ``$`` keys are its options. Each entry says what the construct key and
each option hold, as one of the :data:`KINDS`.

v1 idioms (:mod:`engine.idioms`) are load and lint errors saying what to write
instead; ``proxai migrate-rules`` rewrites them.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import constructs as c
from . import idioms
from .constructs import template_params  # noqa: F401 - part of the registry's interface
from .expr import variables_of
from .hooks import HOOKS  # noqa: F401 - the hooks, registered in engine/hooks
from .idioms import RETIRED, RETIRED_HOOKS, V1Idiom, v1_literal, yaml_scalar  # noqa: F401 - re-exported

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
    holds: str                                       # kind of the construct key's value
    options: dict = field(default_factory=dict)      # option -> kind
    fallible: bool = False                           # can fail at run time (gets the rule location)
    summary: str = ""
    check: Callable | None = None                    # check(compiler, node): what its keys' shapes do not say


CONSTRUCTS: dict[str, Construct] = {
    "$lit": Construct("$lit", "value",
                      summary="a literal value (write the YAML tag: `type: !lit function`)"),
    "$nullable": Construct("$nullable", "template",
                           summary="the key is always sent: the template's value, or null (`{$nullable: null}` for always null)"),
    "$map": Construct("$map", "template", {"$as": "template", "$where": "template", "$flat": "flag"}, True,
                      summary="each item of a list through `$as` (default `@`), kept when `$where` holds; `$flat` splices list results"),
    "$switch": Construct("$switch", "template", {"$cases": "cases", "$default": "template", "$what": "text"}, True,
                         summary="the case whose key is the value (`null`, `true`, `false` or its text); no match and no `$default` fails, naming `$what`", check=c.check_switch),
    "$if": Construct("$if", "template", {"$then": "template", "$else": "template"},
                     summary="`$then` when the condition is truthy, else `$else` (absent: nothing)"),
    "$first": Construct("$first", "templates", summary="the first non-null of a list of templates"),
    "$table": Construct("$table", "name", {"$of": "template", "$default": "template"}, True,
                        summary="look `$of` (default `@`) up in a value table from rules/tables; a miss without `$default` fails", check=c.check_table),
    "$hook": Construct("$hook", "name", {"$args": "bindings"}, True,
                       summary="call a registered Python hook with `$args` (name -> template)", check=c.check_hook),
    "$fail": Construct("$fail", "text", {"$param": "name"}, True,
                       summary="fail with this message (`{param}` is the client's field, `$param` a sub-field): 400 on requests, 502 on responses and streams"),
    "$ref": Construct("$ref", "name", {"$args": "bindings"},
                      summary="a named template of the same file (`templates:`); `$args` passes the parameters it declares (`{params: [..], body: T}`)", check=c.check_ref),
    "$merge": Construct("$merge", "templates", summary="objects merged left to right"),
    "$concat": Construct("$concat", "templates", summary="lists concatenated (a non-list item is appended)"),
    "$let": Construct("$let", "bindings", {"$in": "template"},
                      summary="bind variables (`$name`) for `$in`"),
}


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


def construct_of(compiler, node: dict) -> Construct:
    """The registry entry of a construct node, after checking the node's keys and shapes
    (a v1 construct: an error, or in a legacy file the entry it runs as)."""
    problem = construct_problem(node)
    if problem is not None:
        raise compiler.error(node, *problem)
    name = next((k for k in node if k in CONSTRUCTS), None)
    if name is None:
        name = next(k for k in node if k in RETIRED)
        compiler.v1(node, name, idioms.retired_construct(name))
        return Construct(name, "text", {"$param": "name"}, True)
    return CONSTRUCTS[name]


_KIND_WORDS = {"templates": "a list of templates", "cases": "a mapping of cases", "bindings": "a mapping of names to templates",
               "name": "a name", "text": "a text", "flag": "true or false"}


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


def free_variables(node, bound: frozenset, where_node=None):
    """``(name, node)`` for every ``$name`` a template reads that ``bound`` does not hold
    (``$map`` and ``$let`` bind theirs for the templates inside them); ``node`` is the
    mapping or list the selector sits in, for the error's location."""
    if isinstance(node, str):
        name = variables_of(node)
        if name is not None and name not in bound:
            yield name, where_node
        return
    for child, parent, _, names in children(node):
        yield from free_variables(child, bound | set(names) if names else bound, parent)


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
