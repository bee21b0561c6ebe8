"""YAML loading that remembers where every mapping and key came from.

Rule errors must say ``file:line``, so mappings load as :class:`Located` dicts
that carry the line of the mapping and of each key. Duplicate keys, which plain
YAML silently collapses, are recorded for the linter.

Every document is checked before it is built: aliases may not expand it past
MAX_NODES nodes, so a small "billion laughs" file fails at once instead of
hanging whoever walks the result. `safe_load_strict` is the loader for files
that are not rules (the config): plain YAML 1.1 types, but a duplicate key is
an error rather than a silent overwrite.
"""
from __future__ import annotations

import re

import yaml

_BOOL = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")


class Located(dict):
    """A dict that knows the file and lines it was read from."""

    __slots__ = ("file", "line", "key_lines")

    def __init__(self, *args, file=None, line=None, key_lines=None, **kw):
        super().__init__(*args, **kw)
        self.file, self.line, self.key_lines = file, line, key_lines or {}

    def where(self, key=None) -> str:
        line = self.key_lines.get(key, self.line) if key is not None else self.line
        return f"{self.file}:{line}"


class LocatedList(list):
    """A list that knows its file, its line and the line of each item."""

    __slots__ = ("file", "line", "item_lines")

    def where(self, index=None) -> str:
        lines = getattr(self, "item_lines", None) or ()
        line = lines[index] if index is not None and 0 <= index < len(lines) else self.line
        return f"{self.file}:{line}"


#: the YAML tag of a literal in a template: ``type: !lit function`` loads as ``{"$lit": "function"}``
LITERAL_TAG = "!lit"


def _loader(file: str, duplicates: list):
    # libyaml's parser (when built in) is several times faster and keeps marks.
    class Loader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
        pass

    # YAML 1.1 reads on/off/yes/no as booleans; rule files use `on:` as a key.
    Loader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Loader.add_implicit_resolver("tag:yaml.org,2002:bool", _BOOL, list("tTfF"))

    def mapping(loader, node):
        loader.flatten_mapping(node)
        out = Located(file=file, line=node.start_mark.line + 1)
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            if key in out:
                duplicates.append((key_node.start_mark.line + 1, key))
            out[key] = loader.construct_object(value_node, deep=True)
            out.key_lines[key] = key_node.start_mark.line + 1
        return out

    def sequence(loader, node):
        out = LocatedList(loader.construct_object(child, deep=True) for child in node.value)
        out.file, out.line = file, node.start_mark.line + 1
        out.item_lines = [child.start_mark.line + 1 for child in node.value]
        return out

    def literal(loader, node):
        # The tagged node is built as if untagged (`!lit 0` is the number, `!lit "0"` the string).
        if isinstance(node, yaml.ScalarNode):
            tag = "tag:yaml.org,2002:str" if node.style else loader.resolve(yaml.ScalarNode, node.value, (True, False))
            value = loader.construct_object(yaml.ScalarNode(tag, node.value, node.start_mark, node.end_mark, node.style))
        elif isinstance(node, yaml.SequenceNode):
            value = list(loader.construct_object(child, deep=True) for child in node.value)
        else:
            value = {loader.construct_object(k, deep=True): loader.construct_object(v, deep=True) for k, v in node.value}
        return Located({"$lit": value}, file=file, line=node.start_mark.line + 1, key_lines={"$lit": node.start_mark.line + 1})

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, sequence)
    Loader.add_constructor(LITERAL_TAG, literal)
    return Loader


def load(text: str, file: str):
    """Parse YAML text; returns ``(document, duplicate_keys)``.

    Raises ``yaml.YAMLError`` (with a mark) on syntax errors and alias bombs.
    """
    duplicates: list = []
    doc = _load_checked(text, _loader(file, duplicates))
    return doc, duplicates


# Far above any real rule or config file (the built-in rules are a few thousand nodes).
MAX_NODES = 200_000


class YAMLLimitError(yaml.YAMLError):
    def __init__(self, problem: str, mark=None):
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


def _load_checked(text: str, loader_class, marks: dict | None = None):
    loader = loader_class(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        check_expansion(node)
        doc = loader.construct_document(node)
        if marks is not None:
            marks.update(node_marks(loader, node))
        return doc
    finally:
        loader.dispose()


def node_marks(loader, root) -> dict:
    """Where each entry of a composed document starts: {path: (line, column)}, 1-based, a path
    being the tuple of keys and list indexes that leads to it (() is the document itself).
    A mapping entry is placed at its key, a list item at the item.

    Run after construction: that has flattened `<<` merges into the mapping nodes, and a later
    pair overriding an earlier one here matches the dict that was built."""
    marks = {(): _mark(root.start_mark)}
    stack = [((), root)]
    visited = 0
    while stack and visited < MAX_NODES:  # the bound also stops a recursive alias
        path, node = stack.pop()
        visited += 1
        if isinstance(node, yaml.MappingNode):
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode):
                    key = path + (loader.construct_object(key_node),)
                    marks[key] = _mark(key_node.start_mark)
                    stack.append((key, value_node))
        elif isinstance(node, yaml.SequenceNode):
            for i, child in enumerate(node.value):
                marks[path + (i,)] = _mark(child.start_mark)
                stack.append((path + (i,), child))
    return marks


def _mark(mark) -> tuple[int, int]:
    return mark.line + 1, mark.column + 1


def check_expansion(root) -> None:
    """Refuse a node graph whose aliases expand it past MAX_NODES (each shared node counted
    once per reference, as a consumer walking the loaded document would meet it)."""
    sizes: dict[int, int] = {}
    # Iterative post-order walk: a deeply nested file must not overflow the stack here.
    stack = [(root, False)]
    while stack:
        node, done = stack.pop()
        if id(node) in sizes:
            continue
        children = _children(node)
        if not done and children:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)
            continue
        size = 1 + sum(sizes.get(id(child), 1) for child in children)
        if size > MAX_NODES:
            raise YAMLLimitError(f"document expands to more than {MAX_NODES} nodes (alias bomb?)", node.start_mark)
        sizes[id(node)] = size


def _children(node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []


class DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key, mark):
        super().__init__(f"duplicate key {key!r}")
        self.problem, self.problem_mark = f"duplicate key {key!r}", mark


class _StrictLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    pass


def _strict_mapping(loader, node):
    # Only the mapping's own keys must be unique: a `<<` merge is overridden on purpose.
    seen: dict = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            if key in seen:
                raise DuplicateKeyError(key, key_node.start_mark)
            seen[key] = True
        except TypeError:  # an unhashable key (a list): the constructor words that error
            break
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def safe_load_strict(text: str, marks: dict | None = None):
    """`yaml.safe_load`, except that duplicate keys and alias bombs are errors. A `marks`
    dict is filled with where each entry starts (see `node_marks`)."""
    return _load_checked(text, _StrictLoader, marks)


def line_of(node, default: int = 0) -> int:
    return getattr(node, "line", None) or default
