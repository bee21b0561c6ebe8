"""What each template construct checks at load, beyond its keys and their shapes:
one small function each, ``check_x(compiler, node)``, raising ``compiler.error(...)``.

:mod:`engine.registry` lists them in its literal table ``CONSTRUCTS``; the compiler
(:mod:`engine.template`) has checked the node's keys against that entry before its
check is called, and walks the node's templates after it. What a construct means at
run time is the Python :mod:`engine.codegen` generates for it.
"""
from __future__ import annotations

from . import idioms
from .errors import suggestion


def template_params(src) -> tuple[tuple[str, ...] | None, object]:
    """A named template is a template, or ``{params: [names], body: template}``: one whose
    inputs are declared; a ``$ref`` passes them in ``$args`` (an input not passed is null)."""
    if isinstance(src, dict) and set(src) == {"params", "body"} and isinstance(src["params"], list):
        return tuple(str(p) for p in src["params"]), src["body"]
    return None, src


def check_switch(c, node) -> None:
    for case in node.get("$cases") or {}:
        if case == "None":
            c.v1(node["$cases"], case, idioms.none_case())
        elif isinstance(case, str) and case in ("$default", "$what"):
            # Indented one level too deep, it would be a case for that very text, silently.
            raise c.error(node["$cases"], f"{case!r} belongs beside $cases, not among them", case)


def _hint(name, known) -> str:
    hint = suggestion(name, known)
    return f"; {hint}" if hint else ""


def check_table(c, node) -> None:
    if node["$table"] not in c.tables:
        raise c.error(node, f"unknown table {node['$table']!r}{_hint(node['$table'], c.tables)}", "$table")


def check_hook(c, node) -> None:
    name = node["$hook"]
    if name in idioms.RETIRED_HOOKS:
        c.v1(node, "$hook", idioms.retired_hook(name))
    elif name not in c.hooks:
        raise c.error(node, f"unknown hook {name!r}{_hint(name, c.hooks)}", "$hook")


def check_ref(c, node) -> None:
    name = node["$ref"]
    if name not in c.named_src:
        raise c.error(node, f"unknown template {name!r}{_hint(name, c.named_src)}", "$ref")
    params, _ = template_params(c.named_src[name])
    unknown = [k for k in node.get("$args") or {} if k not in (params or ())]
    if unknown:
        declared = f"its params are {', '.join(params)}" if params else "it declares no params"
        raise c.error(node, f"template {name!r} has no parameter {unknown[0]!r} ({declared})", "$args")
