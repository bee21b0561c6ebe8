"""Every problem of a codec file that failed to compile, not only the first.

The compiler stops at a file's first problem (and the server refuses to start on it).
For ``proxai lint`` the loader then compiles that file again part by part, each part
on its own: the hooks and options, each named template, each reject, each field of a
plain output object (down to the construct that fails), each transition's ``when``
and ``steps``. A part that compiles adds nothing; each part that fails adds its
problem, at its own ``file:line``.
"""
from __future__ import annotations

from typing import Callable

from .errors import RuleError
from .yamlsrc import Located


def problems_of(kind: str, doc: dict, named: dict, compiler: Callable) -> list[RuleError]:
    """The problems of the layered codec ``doc``, whose templates may ``$ref`` those in
    ``named``; ``compiler(named)`` makes a checking compiler of the file."""
    found: list[RuleError] = []
    if kind.startswith("stream."):
        _stream(doc, named, compiler, found)
    else:
        _codec(doc, named, compiler, found)
    return found


def _attempt(found: list, fn, *args) -> bool:
    """Run ``fn(*args)``; False, and its problem in ``found``, when it raises one."""
    try:
        fn(*args)
        return True
    except RuleError as err:
        found.append(err)
        return False


def _codec(doc, named, compiler, found) -> None:
    from .codec import Codec

    # Hooks, advisory paths and options, with an output that cannot fail.
    head = {k: v for k, v in doc.items() if k not in ("templates", "reject", "output")}
    _attempt(found, Codec, _like(doc, {**head, "output": {}}), compiler({}))
    for name in named:
        _attempt(found, compiler(named).ref, name)
    for r in doc.get("reject") or []:
        if isinstance(r, dict) and "when" in r:
            _attempt(found, compiler(named).check, r["when"], r, "when")
    if "output" in doc:
        _template(doc["output"], doc, "output", compiler(named), found)


def _template(node, parent, key, c, found) -> None:
    """Check ``node`` (the compiler's check pass, no code generated); when it fails, look
    for the problems inside a plain object or a list item by item (a construct is
    reported as a whole: its parts are not templates)."""
    before = len(found)
    if _attempt(found, c.check, node, parent, key):
        return
    err = found.pop()
    if isinstance(node, dict) and not any(isinstance(k, str) and k.startswith("$") for k in node):
        for k, v in node.items():
            _template(v, node, k, c, found)
    elif isinstance(node, list):
        for i, item in enumerate(node):
            _template(item, node, i, c, found)
    if len(found) == before:
        found.append(err)


def _stream(doc, named, compiler, found) -> None:
    from .stream import GLOBALS, StreamRules, Transition, _check_free
    from .template import template_params

    # State, split, stamp and key first: a state object's methods are hooks of the file.
    head = compiler({})
    if not _attempt(found, StreamRules, _like(doc, {**doc, "on": {}, "eof": [], "templates": {}}), head):
        return  # the transitions would be checked against the wrong hooks
    hooks = head.hooks

    def checking():
        c = compiler(named)
        c.hooks = hooks
        return c

    for name, src in named.items():
        params, body = template_params(src)
        if _attempt(found, _check_free, checking(), body, GLOBALS | set(params or ()), f"template {name!r}"):
            _attempt(found, checking().ref, name)
    transitions = [t for ts in (doc.get("on") or {}).values() for t in ts or []] + list(doc.get("eof") or [])
    for t in transitions:
        if not (isinstance(t, Located) and set(t) <= {"when", "steps"} and isinstance(t.get("steps") or [], list)):
            _attempt(found, Transition, t, checking())
            continue
        if "when" in t:
            _attempt(found, Transition, _like(t, {"when": t["when"]}), checking())
        # Each step after the steps before it that passed (what their `let`s bind).
        kept: list = []
        for step in t.get("steps") or []:
            if _attempt(found, Transition, _like(t, {"steps": [*kept, step]}), checking()):
                kept.append(step)
            elif isinstance(step, Located) and isinstance(step.get("let"), dict):
                # A broken `let` still binds its names: the later steps are not blamed for it.
                kept.append(_like(step, {"let": _like(step["let"], {k: None for k in step["let"]})}))


def _like(node, items: dict) -> Located:
    """``items`` as a mapping placed where ``node`` is (its file and lines)."""
    return Located(items, file=getattr(node, "file", None), line=getattr(node, "line", None),
                   key_lines=dict(getattr(node, "key_lines", {}) or {}))
