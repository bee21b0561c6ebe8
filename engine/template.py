"""Templates: the plain-data language rule files use to build one payload from another.

A template is YAML data:

* a string is a selector (see :mod:`engine.expr`);
* ``!lit text`` (loaded as ``{"$lit": "text"}``) is a literal; a number, boolean or
  null is itself;
* a mapping without ``$`` keys builds an object; keys whose value is null are left out
  (``{$nullable: x}`` keeps the key, with value null);
* a list builds a list (null items left out);
* a mapping with a ``$`` key is a construct of :data:`engine.registry.CONSTRUCTS`, with
  its options as sibling ``$`` keys.

The :class:`Compiler` checks every node against the registry (the same pass the linter
runs, since the linter runs this compiler) with the rule location on every error, then
hands the checked tree to :mod:`engine.codegen`, whose generated Python is the one way
rules run. :class:`Scope` carries the data path so rejections name the client's field
(``messages[2].content[1]``).
"""
from __future__ import annotations

from . import expr as _expr
from . import registry
from .codegen import Generator
from .errors import RuleError
from .registry import CONSTRUCTS, template_params  # noqa: F401 - re-exported for rule readers
from .scope import MISS as _MISS, NULL, Fn, Run, Scope  # noqa: F401 - re-exported
from .yamlsrc import Located, LocatedList


class Compiler:
    """Checks and compiles the templates of one rule file; knows its hooks, tables and
    named templates.

    ``legacy`` (true, or a set of file names) lets v1 idioms of those files through,
    compiled as before, instead of failing on them; ``found`` (a list) collects every
    v1 idiom met, as :class:`engine.idioms.V1Idiom`: the migration reads it.
    ``observe(selector, where, depth)``, when given, sees every selector checked;
    ``depth`` counts the ``$map`` items it is inside (0: the input itself).
    """

    def __init__(self, file: str, hooks: dict, tables: dict, named: dict | None = None,
                 legacy=False, found: list | None = None, observe=None):
        self.file, self.hooks, self.tables = file, hooks, tables
        self.named_src = named or {}
        self.legacy = True if found is not None else legacy
        self.found = found
        self.observe = observe
        self.depth = 0
        self.checked: set = set()  # names of the named templates checked
        self.generator = Generator(self)

    def where(self, node, key=None) -> str:
        if isinstance(node, (Located, LocatedList)):
            return node.where(key)
        return f"{self.file}:{getattr(node, 'line', 0)}"

    def error(self, node, problem: str, key=None) -> RuleError:
        file, _, line = self.where(node, key).rpartition(":")
        return RuleError(problem, file, int(line) if line.isdigit() else None)

    def v1(self, node, key, idiom) -> None:
        """A v1 idiom at ``node[key]``: an error, or (legacy) recorded and let through."""
        if self.found is not None:
            idiom.where = self.where(node, key)
            self.found.append(idiom)
        legacy = self.legacy
        if legacy is not True and not (legacy and getattr(node, "file", self.file) in legacy):
            raise self.error(node, idiom.message(), key)

    # --- the check pass ----------------------------------------------------------------
    def check(self, node, parent=None, key=None) -> None:
        """Check ``node``, found at ``parent[key]`` (for error locations), and every template
        inside it: each construct's keys and shapes, then its registry check."""
        if isinstance(node, str):
            where = self.where(parent, key) if parent is not None else f"{self.file}:0"
            if self.observe is not None:
                self.observe(node, where, self.depth)
            if parent is not None:
                idiom = registry.v1_literal(node)
                if idiom is not None:
                    self.v1(parent, key, idiom)
                    return
            _expr.check(node, where)
            return
        if isinstance(node, dict) and any(isinstance(k, str) and k.startswith("$") for k in node):
            entry = registry.construct_of(self, node)
            if entry.check is not None:
                entry.check(self, node)
        for child, parent_, key_, bound in registry.children(node):
            inside_map = "index" in bound and "$map" in node
            self.depth += inside_map
            try:
                self.check(child, parent_, key_)
            finally:
                self.depth -= inside_map

    def ref(self, name: str, observed: bool = True) -> None:
        """Check the named template ``name`` (once: ``$ref`` may recurse). The generator
        checks a template it is about to generate unobserved: ``observe`` sees the
        templates the caller checks, not those they refer to."""
        if name not in self.checked:
            self.checked.add(name)
            _, body = template_params(self.named_src[name])
            observe, self.observe = self.observe, self.observe if observed else None
            try:
                self.check(body, self.named_src, name)
            finally:
                self.observe = observe

    # --- compiling ---------------------------------------------------------------------
    def compile(self, node, parent=None, key=None) -> Fn:
        """``fn(scope)`` for the template ``node`` found at ``parent[key]``: checked, then
        generated as one Python function."""
        self.check(node, parent, key)
        return self.generator.template(node, parent, key)

    build = compile
