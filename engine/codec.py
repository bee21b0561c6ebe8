"""Request and response codecs: one rule file each, run as reject -> before -> output -> after."""
from __future__ import annotations

import functools
import re

import orjson

from .codegen import fail
from .errors import InvalidRequest, TranslationError, UpstreamProtocolError, suggestion
from .template import Compiler, Run, Scope

#: values that count as absent for advisory fields (docs/mappings.md "neutral values")
NEUTRAL = (None, False, 0, "", [], {})


class Codec:
    """A compiled ``request.*`` or ``response.*`` rule file."""

    def __init__(self, doc: dict, compiler: Compiler):
        self.kind, self.protocol, self.file = doc["kind"], doc["protocol"], compiler.file
        request = self.kind.startswith("request")
        self.run = Run(InvalidRequest if request else UpstreamProtocolError, annotate_paths=self.kind == "request.decode")
        self.params = dict(doc.get("params") or {})
        # A reject table is data; each entry fails as the one failure construct, $fail, does.
        rejects = doc.get("reject") or []
        for r in rejects:
            compiler.check(r["when"], r, "when")
        self.rejects = [(str(r["message"]), r["param"], compiler.where(r)) for r in rejects]
        self.advisory = [_advisory_path(entry) for entry in doc.get("advisory") or []]
        self.advise = _advisory_fn(self.advisory, compiler.file) if self.advisory else None
        self.before = [_hook(compiler, name, doc["before"], i) for i, name in enumerate(doc.get("before") or [])]
        self.after = [_hook(compiler, name, doc["after"], i) for i, name in enumerate(doc.get("after") or [])]
        for name in compiler.named_src:
            compiler.ref(name)
        self.output = compiler.compile(doc["output"], doc)
        # the index of the first reject whose `when` holds, all tested in one generated function
        self.first_reject = compiler.generator.first_true([(r["when"], r, "when") for r in rejects]) if rejects else None

    def apply(self, payload, ctx):
        if self.params:
            ctx.param_names.update(self.params)
        scope = Scope(payload, {"root": payload, "ctx": ctx.vars()}, "", ctx, self.run)
        if self.first_reject is not None:
            i = self.first_reject(scope)
            if i >= 0:
                message, param, where = self.rejects[i]
                try:
                    fail(scope, message, param)
                except TranslationError as err:
                    err.rule = where
                    raise
        if self.advisory and isinstance(payload, dict):
            # An encoder's fields have no slot in its own protocol; a decoder's have none in the
            # canonical model, so none in the protocol the payload is going to.
            if self.kind.endswith("encode"):
                target = self.protocol
            else:
                target = ctx.provider_protocol if self.kind.startswith("request") else ctx.client_protocol
            for where in self.advise(payload):
                ctx.trace(f"dropped advisory field {ctx.param_names.get(where, where)} (no slot in {target})")
        for hook in self.before:
            payload = hook(scope)
            scope = scope.at(payload)
            scope.vars["root"] = payload
        try:
            out = self.output(scope)
        except (TypeError, ValueError, AttributeError, KeyError, IndexError) as err:
            raise self.run.error_class(f"malformed {self.protocol} payload ({type(err).__name__})", None, self.file) from err
        for hook in self.after:
            out = hook(scope.at(out))
        if self.kind == "request.encode":
            _strip_paths(out)
        return out


def _strip_paths(value) -> None:
    """Drop the decoder's ``_path`` annotations from a provider request: an encoder
    that copies an IR object wholesale must not leak them upstream."""
    try:
        if b'"_path"' not in orjson.dumps(value):
            return  # the usual case, found by one serialisation (far cheaper than the walk)
    except (orjson.JSONEncodeError, TypeError):
        pass  # not JSON as it stands (the walk does not mind)
    todo = [value]
    pop, push = todo.pop, todo.append
    while todo:
        value = pop()
        if isinstance(value, dict):
            if isinstance(value.get("_path"), str):
                del value["_path"]
            value = value.values()
        for item in value:
            if item.__class__ is not str and isinstance(item, (dict, list)):  # most leaves are text
                push(item)


_STEP = re.compile(r"([A-Za-z_]\w*)((?:\[(?:\*|type=[\w.-]+)\])*)")


def _advisory_path(entry: str) -> list[tuple]:
    """``messages[*].content[type=document].citations`` -> steps: ("field", name),
    ("each", None) for ``[*]``, ("each", "document") for ``[type=document]``."""
    steps: list[tuple] = []
    for part in entry.split("."):
        match = _STEP.fullmatch(part)
        if match is None:
            raise ValueError(f"bad advisory path {entry!r}")
        steps.append(("field", match.group(1)))
        for sel in re.findall(r"\[([^\]]+)\]", match.group(2)):
            steps.append(("each", None if sel == "*" else sel[len("type="):]))
    return steps


def _advisory_fn(paths: list, file: str):
    """``fn(payload) -> [wire path, ...]``: every place an advisory path reaches a value that
    is not neutral, path by path in document order. It runs on every request and most
    paths reach nothing, so the paths are merged into a tree (``messages[*].content[*]``
    is walked once for all the paths under it) and generated as one function of nested
    loops. An IR item decoded from the client's wire (with a ``_path``) is named by the
    client's field."""
    tree: dict = {}  # step -> subtree; None -> indexes of the paths that end here
    for index, steps in enumerate(paths):
        node = tree
        for step in steps:
            node = node.setdefault(step, {})
        node.setdefault(None, []).append(index)
    lines = ["def advise(payload):", "    hits = []"]
    n = 0

    def walk(node, var, where, ind):
        nonlocal n
        pad = "    " * ind
        for index in node.get(None, ()):
            lines.append(pad + f"if {var} not in NEUTRAL: hits.append(({index}, {where}))")
        steps = [step for step in node if step is not None]
        if not steps:
            return
        n += 1
        w = f"w{n}"
        lines.append(pad + f"{w} = {var}['_path'] if isinstance({var}, dict) and isinstance({var}.get('_path'), str) else {where}")
        for kind, arg in steps:
            if kind == "field":
                v = f"v{n}_{arg}"
                lines.append(pad + f"if isinstance({var}, dict) and {arg!r} in {var}:")
                lines.append(pad + f"    {v} = {var}[{arg!r}]")
                walk(node[(kind, arg)], v, f"(f'{{{w}}}.{arg}' if {w} else {arg!r})", ind + 1)
        each = [arg for kind, arg in steps if kind == "each"]
        if each:
            i, item = f"i{n}", f"x{n}"
            lines.append(pad + f"if isinstance({var}, list):")
            lines.append(pad + f"    for {i}, {item} in enumerate({var}):")
            for arg in each:
                if arg is None:
                    walk(node[("each", None)], item, f"f'{{{w}}}[{{{i}}}]'", ind + 2)
                else:
                    lines.append(pad + f"        if isinstance({item}, dict) and {item}.get('type') == {arg!r}:")
                    walk(node[("each", arg)], item, f"f'{{{w}}}[{{{i}}}]'", ind + 3)

    walk(tree, "payload", "''", 1)
    # the tree finds hits in document order within each path; report them path by path
    lines.append("    if len(hits) > 1: hits.sort(key=FIRST)")
    lines.append("    return [where for _, where in hits]")
    env = {"NEUTRAL": NEUTRAL, "FIRST": lambda hit: hit[0]}
    exec(compile("\n".join(lines), f"<advisory {file}>", "exec"), env)  # noqa: S102 - generated from checked paths
    return env["advise"]


def _walk(value, steps, where):
    """(wire path, value) for every place an advisory path reaches (the reference walk)."""
    if not steps:
        yield where, value
        return
    (kind, arg), rest = steps[0], steps[1:]
    if isinstance(value, dict) and isinstance(value.get("_path"), str):
        where = value["_path"]  # an IR item decoded from the client's wire: name the client's field
    if kind == "field":
        if isinstance(value, dict) and arg in value:
            yield from _walk(value[arg], rest, f"{where}.{arg}" if where else arg)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if arg is None or (isinstance(item, dict) and item.get("type") == arg):
                yield from _walk(item, rest, f"{where}[{i}]")


def _hook(compiler: Compiler, name: str, names, index: int):
    """The hook ``name``, item ``index`` of the file's ``before`` / ``after`` list ``names``."""
    hook = compiler.hooks.get(name)
    if hook is None:
        hint = suggestion(name, compiler.hooks)
        raise compiler.error(names, f"unknown hook {name!r}" + (f"; {hint}" if hint else ""), index)
    if getattr(hook, "reads_tables", False):  # a whole-payload pass that looks values up in rules/tables
        return functools.partial(hook, tables=compiler.tables)
    return hook
