"""``proxai lint [DIR ...]``: schema and semantic checks over rule files.

Each check is a small function ``check_x(ctx, file, doc) -> iterator of (line, problem)``
registered in :data:`CHECKS`; the runner adds the file name to every message and
prints ``file:line: problem``. A directory other than the built-in rules is
checked as an override: layered over the built-in rules, as the server would load it.
"""
from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import jmespath

from . import expr as _expr
from .errors import RuleError
from .ruleset import BUILTIN_RULES, SCHEMAS, Layered, layer, read_file, rule_files
from .template import CONSTRUCTS, OPTIONS
from .yamlsrc import Located


@dataclass
class LintContext:
    hooks: dict
    tables: dict          # name -> table doc
    enums: dict           # name -> list
    ir_events: dict       # IR event type -> set of fields
    layered: dict = None  # (kind, protocol) -> the layered doc (stream state objects)


def _ir_event_fields() -> dict:
    schema = json.loads((SCHEMAS / "ir.schema.json").read_text())
    out = {}
    for variant in schema["$defs"]["event"]["oneOf"]:
        props = variant["properties"]
        out[props["type"]["const"]] = set(props)
    return out


def _line(node, key=None) -> int:
    if isinstance(node, Located):
        return node.key_lines.get(key, node.line) if key is not None else node.line
    return getattr(node, "line", 0) or 0


# --- template walking -------------------------------------------------------------


def _selectors(node, parent, key, fields_scope=True):
    """Yield (selector, line, at_event_scope) for every selector in a template."""
    if isinstance(node, str):
        yield node, _line(parent, key), fields_scope
    elif isinstance(node, dict):
        ops = [k for k in node if isinstance(k, str) and k.startswith("$")]
        primary = next((k for k in ops if k in CONSTRUCTS), None)
        for k, v in node.items():
            if primary in ("$lit", "$reject", "$error") and k in ("$lit", "$reject", "$error", "$param"):
                continue
            if k in ("$what", "$table", "$hook", "$ref", "$flat"):
                continue
            inner = fields_scope and not (primary == "$map" and k in ("$as", "$where"))
            if k in ("$cases", "$args", "$let"):
                for kk, vv in (v or {}).items():
                    yield from _selectors(vv, v, kk, inner)
            else:
                yield from _selectors(v, node, k, inner)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _selectors(item, node, None, fields_scope)


def _constructs(node):
    """Yield every construct mapping in a template."""
    if isinstance(node, dict):
        if any(isinstance(k, str) and k.startswith("$") for k in node):
            yield node
        for k, v in node.items():
            if k == "$lit":
                continue
            yield from _constructs(v)
    elif isinstance(node, list):
        for item in node:
            yield from _constructs(item)


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


def _templates_of(doc) -> list:
    """(template, parent, key) for every template-bearing place of a codec or stream file."""
    out = []
    for key in ("output",):
        if key in doc:
            out.append((doc[key], doc, key))
    for name, tmpl in (doc.get("templates") or {}).items():
        out.append((tmpl, doc["templates"], name))
    for rule in doc.get("reject") or []:
        out.append((rule["when"], rule, "when"))
    return out


def _transitions(doc):
    for event, items in (doc.get("on") or {}).items():
        for t in items or []:
            yield event, t
    for t in doc.get("eof") or []:
        yield None, t


def _step_templates(t):
    """(template, parent, key) for a transition's `when` and each step's action (stream rules v2)."""
    if not isinstance(t, dict):
        return
    if "when" in t:
        yield t["when"], t, "when"
    for step in t.get("steps") or []:
        if isinstance(step, dict):
            for key, value in step.items():
                if key != "error":
                    yield value, step, key


def _object_hooks(ctx, doc) -> set:
    """`name.method` for the stateful objects a stream file declares under `state:` (its
    own, or the layered one when the file is an override)."""
    from .hooks import OBJECTS

    out = set()
    if not str(doc.get("kind", "")).startswith("stream."):
        return out
    layered = (ctx.layered or {}).get((doc.get("kind"), doc.get("protocol")))
    state = {**((layered or {}).get("state") or {}), **(doc.get("state") or {})}
    for name, value in state.items():
        cls = OBJECTS.get(value.get("object")) if isinstance(value, dict) else None
        if cls is not None:
            out |= {f"{name}.{m}" for m in dir(cls) if not m.startswith("_") and callable(getattr(cls, m))}
    return out


# --- checks ---------------------------------------------------------------------


def check_selectors(ctx: LintContext, doc):
    places = list(_templates_of(doc))
    for _, t in _transitions(doc):
        places.extend(_step_templates(t))
    if "key" in doc:
        places.append((doc["key"], doc, "key"))
    for tmpl, parent, key in places:
        for selector, line, _ in _selectors(tmpl, parent, key):
            try:
                _expr.compile_expr(selector, f"x:{line}")
            except RuleError as err:
                yield line, err.problem


def check_constructs(ctx: LintContext, doc):
    places = list(_templates_of(doc)) + [(t, t, None) for _, t in _transitions(doc)]
    # An override may $ref the templates of the file it is layered over.
    layered = (ctx.layered or {}).get((doc.get("kind"), doc.get("protocol"))) or {}
    named = {**(layered.get("templates") or {}), **(doc.get("templates") or {})}
    hooks = set(ctx.hooks) | _object_hooks(ctx, doc)
    for tmpl, _, _ in places:
        for node in _constructs(tmpl):
            ops = [k for k in node if isinstance(k, str) and k.startswith("$")]
            primary = next((k for k in ops if k in CONSTRUCTS), None)
            if primary is None:
                yield _line(node), f"unknown construct {ops[0]!r}"
                continue
            for extra in (k for k in ops if k != primary and k not in OPTIONS.get(primary, ())):
                yield _line(node, extra), f"{primary} does not take {extra}"
            if primary == "$hook" and node["$hook"] not in hooks:
                yield _line(node, "$hook"), f"unknown hook {node['$hook']!r}"
            if primary == "$table" and node["$table"] not in ctx.tables:
                yield _line(node, "$table"), f"unknown table {node['$table']!r}"
            if primary == "$ref" and node["$ref"] not in named:
                yield _line(node, "$ref"), f"unknown template {node['$ref']!r}"


def check_named_hooks(ctx: LintContext, doc):
    for key in ("split", "stamp"):
        if key in doc and doc[key] not in ctx.hooks and doc[key] not in _object_hooks(ctx, doc):
            yield _line(doc, key), f"unknown hook {doc[key]!r} in {key}"
    for key in ("before", "after"):
        for i, name in enumerate(doc.get(key) or []):
            if name not in ctx.hooks:
                yield _line(doc, key), f"unknown hook {name!r} in {key}"


def check_tables(ctx: LintContext, doc):
    for table in doc.get("tables") or []:
        source, target = table.get("from"), table.get("to")
        keys = {str(k) for k in table["map"]}
        if "default" not in table:
            if source not in ctx.enums:
                yield _line(table, "from"), f"table {table['name']}: unknown enum {source!r} (add it to enums or give a default)"
            else:
                merged = ctx.tables.get(table["name"], table)
                missing = [str(v) for v in ctx.enums[source] if str(v) not in {str(k) for k in merged["map"]}]
                if missing:
                    yield _line(table, "map"), f"table {table['name']} is not total over {source}: missing {', '.join(missing)}"
        if source in ctx.enums:
            unknown = sorted(keys - {str(v) for v in ctx.enums[source]})
            for key in unknown:
                yield _line(table["map"], key), f"table {table['name']}: {key!r} is not a value of {source}"
        if target:
            if target not in ctx.enums:
                yield _line(table, "to"), f"table {table['name']}: unknown enum {target!r}"
            else:
                allowed = {str(v) for v in ctx.enums[target]}
                for key, value in table["map"].items():
                    if str(value) not in allowed:
                        yield _line(table["map"], key), f"table {table['name']}: {value!r} is not a value of {target}"


def check_events(ctx: LintContext, doc):
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


def check_event_fields(ctx: LintContext, doc):
    """Encoders read IR event fields; decoders emit IR events: both must use fields the IR has."""
    kind = doc.get("kind")
    if kind == "stream.encode":
        for event, t in _transitions(doc):
            fields = ctx.ir_events.get(str(event)) if event is not None else None
            if fields is None:
                continue
            for value, parent, key in _step_templates(t):
                for selector, line, at_event in _selectors(value, parent, key):
                    if not at_event or selector.startswith("$"):
                        continue
                    try:
                        ast = jmespath.compile(selector).parsed
                    except jmespath.exceptions.JMESPathError:
                        continue
                    for name in sorted(_root_fields(ast) - fields):
                        yield line, f"IR event {event!r} has no field {name!r}"
    elif kind == "stream.decode":
        for _, t in _transitions(doc):
            emits = [step["emit"] for step in (t.get("steps") or []) if isinstance(step, dict) and "emit" in step]
            for item in (i for e in emits for i in (e if isinstance(e, list) else [e])):
                if not isinstance(item, dict) or not isinstance(item.get("type"), str):
                    continue
                literal = item["type"].strip()
                if not (literal.startswith("'") and literal.endswith("'")):
                    continue
                name = literal[1:-1]
                fields = ctx.ir_events.get(name)
                if fields is None:
                    yield _line(item, "type"), f"emits unknown IR event {name!r}"
                    continue
                for key in item:
                    if not str(key).startswith("$") and key not in fields:
                        yield _line(item, key), f"IR event {name!r} has no field {key!r}"


def check_steps(ctx: LintContext, doc):
    """Stream rules v2: transitions are `when` + `steps`, each step one action; objects exist."""
    from .hooks import OBJECTS
    from .stream import STEP_ACTIONS, V1_HINT

    if not str(doc.get("kind", "")).startswith("stream."):
        return
    for name, value in (doc.get("state") or {}).items():
        if isinstance(value, dict) and "object" in value and value["object"] not in OBJECTS:
            yield _line(doc["state"], name), f"state {name!r}: unknown object {value['object']!r}"
    for _, t in _transitions(doc):
        old = [k for k in t if k in ("do", "set", "emit", "error")]
        if old:
            yield _line(t, old[0]), f"{V1_HINT} (found {', '.join(old)})"
            continue
        for step in t.get("steps") or []:
            actions = [k for k in step if k in STEP_ACTIONS] if isinstance(step, dict) else []
            if len(actions) != 1 or len(step) != 1:
                yield _line(step), (f"a step is a mapping with exactly one of {', '.join(STEP_ACTIONS)}; "
                                    "write each action as its own list item, in the order it must run")


#: every semantic check, in the order its messages are reported
CHECKS = [check_selectors, check_constructs, check_named_hooks, check_tables, check_events, check_event_fields,
          check_steps]


def lint_dirs(dirs: list[Path]) -> list[str]:
    from .hooks import HOOKS

    messages: list[str] = []
    base = Layered()
    base_files = []
    builtin = BUILTIN_RULES.resolve()
    for directory in dirs:
        directory = Path(directory)
        if not directory.is_dir():
            messages.append(f"{directory}:0: not a directory")
            continue
        sources = []
        for path in rule_files(directory):
            src, problems = read_file(path)
            messages.extend(str(p) for p in problems)
            if src is not None:
                sources.append(src)
        layered = Layered()
        if directory.resolve() != builtin:
            if not base_files:
                for path in rule_files(BUILTIN_RULES):
                    src, problems = read_file(path)
                    if src is not None and not problems:
                        base_files.append(src)
            layer(base_files, layered)
        layer([s for s in sources], layered)
        ctx = LintContext(HOOKS, {n: d for n, (d, _) in layered.tables.items()},
                          {n: v for n, (v, _, _) in layered.enums.items()}, _ir_event_fields(),
                          {k: d for k, (d, _) in layered.codecs.items()})
        for src in sources:
            for check in CHECKS:
                try:
                    for line, problem in check(ctx, src.doc):
                        messages.append(f"{src.path}:{line}: {problem}")
                except (KeyError, TypeError, AttributeError):
                    continue  # the schema check already reported the malformed shape
        if not any(m for m in messages):
            messages.extend(_compile_all(layered))
    return list(dict.fromkeys(messages))


def _compile_all(layered: Layered) -> list[str]:
    """Last line of defence: compile everything as the server would."""
    from .hooks import HOOKS
    from .codec import Codec
    from .ruleset import build_tables
    from .stream import StreamRules
    from .template import Compiler

    try:
        tables = build_tables(layered)
        for (kind, _), (doc, file) in layered.codecs.items():
            compiler = Compiler(file, HOOKS, tables, doc.get("templates") or {})
            (StreamRules if kind.startswith("stream.") else Codec)(doc, compiler)
    except RuleError as err:
        return [str(err)]
    return []


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    dirs = [Path(a) for a in args] or [BUILTIN_RULES]
    messages = lint_dirs(dirs)
    for message in messages:
        print(message)
    if messages:
        print(f"{len(messages)} problem(s)", file=sys.stderr)
        return 1
    count = sum(len(rule_files(d)) for d in dirs if Path(d).is_dir())
    print(f"ok: {count} rule file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
