"""``proxai lint --migrate DIR``: rewrite the v1 idioms of rule files in place, as v2.

The compiler finds the idioms (it records each one it meets, see
:meth:`engine.template.Compiler.v1`), so exactly the places the loader reads as
templates are rewritten; the rewrite is textual, on the spans YAML reports, so
comments, ordering and layout stay. Running it again changes nothing.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from . import yamlsrc
from .registry import RETIRED, RETIRED_HOOKS


def _spans(text: str):
    """Every scalar of a YAML text, with whether it is a mapping key, and every flow mapping."""
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    scalars, mappings = [], []
    stack = [(root, False)] if root is not None else []
    while stack:
        node, is_key = stack.pop()
        if isinstance(node, yaml.ScalarNode):
            scalars.append((node, is_key))
        elif isinstance(node, yaml.SequenceNode):
            stack.extend((child, False) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            mappings.append(node)
            for k, v in node.value:
                stack.append((k, True))
                stack.append((v, False))
    return scalars, mappings


def rewrite(text: str, idioms: list) -> str:
    """``text`` with the recorded idioms (of this file) replaced by their v2 form."""
    literals = {i.old: i.replacement for i in idioms if i.old not in RETIRED and i.old not in RETIRED_HOOKS and i.old != "None"}
    key_lines = {(i.old, int(i.where.rpartition(":")[2])) for i in idioms if i.old in RETIRED or i.old == "None"}
    hook_lines = {int(i.where.rpartition(":")[2]) for i in idioms if i.old in RETIRED_HOOKS}
    scalars, mappings = _spans(text)
    edits = []
    for node, is_key in scalars:
        line = node.start_mark.line + 1
        if node.tag != "tag:yaml.org,2002:str" and node.tag != "?" and not node.tag.startswith("tag:yaml.org,2002:"):
            continue  # tagged (!lit): already v2
        if is_key:
            if (node.value, line) in key_lines:
                edits.append((node.start_mark.index, node.end_mark.index, "null" if node.value == "None" else "$fail"))
        elif node.style and node.value in literals:
            edits.append((node.start_mark.index, node.end_mark.index, literals[node.value]))
    for node in mappings:
        pairs = {k.value: v for k, v in node.value if isinstance(k, yaml.ScalarNode)}
        hook = pairs.get("$hook")
        if hook is None or hook.value not in RETIRED_HOOKS or hook.start_mark.line + 1 not in hook_lines or not node.flow_style:
            continue
        keys = _nulls_keys(pairs.get("$args"))
        if keys is None:
            continue
        edits = [e for e in edits if not (node.start_mark.index <= e[0] < node.end_mark.index)]
        edits.append((node.start_mark.index, node.end_mark.index,
                      "{" + ", ".join(f"{k}: {{$nullable: null}}" for k in keys) + "}"))
    for start, end, new in sorted(edits, reverse=True):
        text = text[:start] + new + text[end:]
    return text


def _nulls_keys(args):
    """The key names of ``$args: {keys: {$lit: [a, b]}}`` (or ``keys: !lit [a, b]``)."""
    if not isinstance(args, yaml.MappingNode):
        return None
    keys = next((v for k, v in args.value if k.value == "keys"), None)
    if isinstance(keys, yaml.MappingNode):
        keys = next((v for k, v in keys.value if k.value == "$lit"), None)
    if not isinstance(keys, yaml.SequenceNode) or not all(isinstance(k, yaml.ScalarNode) for k in keys.value):
        return None
    return [k.value for k in keys.value]


def migrate_dirs(dirs: list[Path]) -> tuple[dict, list[str]]:
    """Rewrite the rule files of ``dirs`` (each layered over the built-in rules, as the
    server loads it); returns ``({file: idioms rewritten}, problems)``."""
    from .ruleset import load_layers

    changed: dict = {}
    problems: list[str] = []
    for directory in dirs:
        found: list = []
        _, errors = load_layers(Path(directory), found=found)
        problems.extend(str(e) for e in errors)
        by_file: dict = {}
        for idiom in found:
            by_file.setdefault(idiom.where.rpartition(":")[0], []).append(idiom)
        for file, idioms in by_file.items():
            path = Path(file)
            if not path.is_file() or not _inside(path, Path(directory)):
                continue
            text = path.read_text(encoding="utf-8")
            new = rewrite(text, idioms)
            if new != text:
                yamlsrc.load(new, file)  # still YAML (raises otherwise, before anything is written)
                path.write_text(new, encoding="utf-8")
                changed[file] = len(idioms)
    return changed, problems


def _inside(path: Path, directory: Path) -> bool:
    try:
        path.resolve().relative_to(directory.resolve())
        return True
    except ValueError:
        return False
