"""YAML loading that remembers where every mapping and key came from.

Rule errors must say ``file:line``, so mappings load as :class:`Located` dicts
that carry the line of the mapping and of each key. Duplicate keys, which plain
YAML silently collapses, are recorded for the linter.
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
    __slots__ = ("file", "line")


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
        return out

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, mapping)
    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, sequence)
    return Loader


def load(text: str, file: str):
    """Parse YAML text; returns ``(document, duplicate_keys)``.

    Raises ``yaml.YAMLError`` (with a mark) on syntax errors.
    """
    duplicates: list = []
    doc = yaml.load(text, Loader=_loader(file, duplicates))  # noqa: S506 - SafeLoader subclass
    return doc, duplicates


def line_of(node, default: int = 0) -> int:
    return getattr(node, "line", None) or default
