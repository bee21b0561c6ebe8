"""Checks over the layered rules that no single template shows: value tables total over
their enums, stream event names and IR event fields. The loader runs them, so the
server refuses what ``proxai lint`` reports (the linter is the loader).

Each check is ``check_x(ctx, doc) -> iterator of (line, problem)``, listed in :data:`CHECKS`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

import jmespath

from .errors import RuleError, suggestion
from .protocol import shared_templates
from .template import Compiler
from .yamlsrc import Located


@dataclass
class CheckContext:
    hooks: dict
    tables: dict          # name -> layered table doc
    built: dict           # name -> engine.tables.Table
    enums: dict           # name -> list
    ir_events: dict       # IR event type -> set of fields
    legacy: object = False
    protocols: dict = field(default_factory=dict)   # protocol -> layered protocol.yaml document
    builtin_tables: dict | None = None   # name -> the built-in file's table doc (None: every table is built in)
    table_refs: set = field(default_factory=set)    # every table name a `$table` of the layered rules names


def ir_event_fields(schemas) -> dict:
    schema = json.loads((schemas / "ir.schema.json").read_text())
    out = {}
    for variant in schema["$defs"]["event"]["oneOf"]:
        props = variant["properties"]
        out[props["type"]["const"]] = set(props)
    return out


def _line(node, key=None) -> int:
    if isinstance(node, Located):
        return node.key_lines.get(key, node.line) if key is not None else node.line
    return getattr(node, "line", 0) or 0


def _transitions(doc):
    for event, items in (doc.get("on") or {}).items():
        for t in items or []:
            yield event, t
    for t in doc.get("eof") or []:
        yield None, t


def _step_values(t):
    """(template, parent, key) of a transition's ``when`` and actions: v1 keys side by
    side (``do``/``set``/``emit``), or v2 ``steps`` of one action each."""
    if not isinstance(t, dict):
        return
    for key, value in t.items():
        if key in ("when", "do", "set", "emit"):
            yield value, t, key
    for step in t.get("steps") or []:
        if isinstance(step, dict):
            for key, value in step.items():
                if key != "error":
                    yield value, step, key


def _emitted(t):
    for value, _, key in _step_values(t):
        if key == "emit":
            yield from (value if isinstance(value, list) else [value])


def _root_fields(ast) -> set:
    kind = ast.get("type")
    if kind == "field":
        return {ast["value"]}
    if kind in ("subexpression", "index_expression", "projection", "filter_projection", "value_projection", "flatten"):
        return _root_fields(ast["children"][0]) if ast["children"] else set()
    if kind in ("comparator", "and_expression", "or_expression", "not_expression", "function_expression", "pipe",
                "multi_select_list", "multi_select_dict", "key_val_pair"):
        out = set()
        for child in ast.get("children", []):
            if isinstance(child, dict):
                out |= _root_fields(child)
        return out
    return set()


def table_refs(docs) -> set:
    """Every table name a ``$table`` names in these documents."""
    out, todo = set(), list(docs)
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            if isinstance(node.get("$table"), str):
                out.add(node["$table"])
            todo.extend(node.values())
        elif isinstance(node, list):
            todo.extend(node)
    return out


#: how near a new table's name must be to a built-in one to be taken for a misspelling of it
_MISSPELT = 0.85


def check_tables(ctx: CheckContext, doc):
    for table in doc.get("tables") or []:
        name = table["name"]
        builtin = ctx.builtin_tables
        if builtin is not None and name not in builtin and name not in ctx.table_refs:
            hint = suggestion(name, builtin, _MISSPELT)
            if hint:
                # Its other problems (not total over its enum) would only mislead.
                yield _line(table, "name"), f"no built-in table named {name}; {hint}"
                continue
        # What the file does not say comes from the built-in table (to, default, the rest of the map).
        merged = ctx.tables.get(name, table)
        source, target = merged.get("from"), merged.get("to")
        base = (builtin or {}).get(name)
        if base is not None and base is not table and "to" in table and base.get("to") not in (None, table["to"]):
            yield _line(table, "to"), f"table {name}: the built-in table's values are {base['to']}, an override cannot change `to`"
        keys = {str(k) for k in table["map"]}
        if "default" not in merged:
            if source not in ctx.enums:
                yield _line(table, "from"), f"table {name}: unknown enum {source!r} (add it to enums or give a default)"
            else:
                missing = [str(v) for v in ctx.enums[source] if str(v) not in {str(k) for k in merged["map"]}]
                if missing:
                    yield _line(table, "map"), f"table {name} is not total over {source}: missing {', '.join(missing)}"
        if source in ctx.enums:
            for key in sorted(keys - {str(v) for v in ctx.enums[source]}):
                yield _line(table["map"], key), f"table {name}: {key!r} is not a value of {source}"
        if target:
            if target not in ctx.enums:
                yield _line(table, "to"), f"table {name}: unknown enum {target!r}"
                continue
            allowed = [str(v) for v in ctx.enums[target]]
            sentinels = [str(v) for v in merged.get("sentinels") or ()]
            values = [(table["map"], key, value) for key, value in table["map"].items()]
            if "default" in table:
                values.append((table, "default", table["default"]))
            for parent, key, value in values:
                # null: the field is left out
                if value is not None and str(value) not in allowed and str(value) not in sentinels:
                    hint = suggestion(value, allowed)
                    yield _line(parent, key), (f"table {name}: {value} is not a {target}: one of {', '.join(allowed)}"
                                               + (f" (or {', '.join(sentinels)})" if sentinels else "")
                                               + (f"; {hint}" if hint else ""))


def check_events(ctx: CheckContext, doc):
    kind = doc.get("kind")
    if kind not in ("stream.decode", "stream.encode"):
        return
    if kind == "stream.encode":
        vocabulary = set(ctx.ir_events)
    else:
        vocabulary = set(doc.get("events") or ctx.enums.get(f"{doc['protocol']}.events") or [])
    on = doc.get("on") or {}
    for event in on:
        if vocabulary and str(event) not in vocabulary:
            yield _line(on, event), f"transition on unknown event {event!r}"


def _literal(value):
    if isinstance(value, dict) and set(value) == {"$lit"}:
        return value["$lit"]
    if isinstance(value, str) and len(value) > 1 and value[0] == value[-1] == "'":
        return value[1:-1]  # v1 (reported elsewhere)
    return None


def check_event_fields(ctx: CheckContext, doc):
    """Encoders read IR event fields; decoders emit IR events: both must use fields the IR has."""
    kind = doc.get("kind")
    if kind == "stream.encode":
        for event, t in _transitions(doc):
            fields = ctx.ir_events.get(str(event)) if event is not None else None
            if fields is None:
                continue
            seen: list = []
            named = shared_templates(ctx.protocols.get(doc.get("protocol")), doc.file, doc.get("templates") or {})
            compiler = Compiler(doc.file, ctx.hooks, ctx.built, named, legacy=True,
                                observe=lambda sel, where, depth: seen.append((sel, where)) if depth == 0 else None)
            for value, parent, key in _step_values(t):
                try:
                    compiler.compile(value, parent, key)
                except RuleError:
                    continue  # the compile pass reports it
            for selector, where in seen:
                if selector.startswith("$"):
                    continue
                try:
                    ast = jmespath.compile(selector).parsed
                except jmespath.exceptions.JMESPathError:
                    continue
                line = int(where.rpartition(":")[2] or 0)
                for name in sorted(_root_fields(ast) - fields):
                    yield line, f"IR event {event!r} has no field {name!r}"
    elif kind == "stream.decode":
        for _, t in _transitions(doc):
            for item in _emitted(t):
                if not isinstance(item, dict):
                    continue
                name = _literal(item.get("type"))
                if not isinstance(name, str):
                    continue
                fields = ctx.ir_events.get(name)
                if fields is None:
                    yield _line(item, "type"), f"emits unknown IR event {name!r}"
                    continue
                for key in item:
                    if not str(key).startswith("$") and key not in fields:
                        yield _line(item, key), f"IR event {name!r} has no field {key!r}"


#: every check, in the order its messages are reported
CHECKS = [check_tables, check_events, check_event_fields]
