"""No import cycles: the modules of each package import one another as a tree of layers.

The graph is read with ``ast`` from the source (not by importing), so an import inside a
function counts as much as one at the top of the module: a function-level import hides
a cycle from Python's import machinery, not from the design.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("engine", "proxai")


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of PACKAGES (a package is its __init__)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that the module ``name`` imports, anywhere in its body."""
    is_package = path.name == "__init__.py"
    targets: set[str] = set()

    def nearest(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            targets.update(filter(None, (nearest(alias.name) for alias in node.names)))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                base_name = ".".join(base + ([node.module] if node.module else []))
            else:
                base_name = node.module or ""
            for alias in node.names:
                sub = f"{base_name}.{alias.name}"
                target = sub if sub in known else nearest(base_name)
                if target is not None:
                    targets.add(target)
    targets.discard(name)
    return targets


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (``a -> b -> ... -> a``) per strongly connected component of more than one
    module (Tarjan), followed by the component's other modules, if any, after a ``|``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    found = []
    for component in components:
        cycle = _one_cycle(edges, component)
        rest = sorted(component - set(cycle))
        found.append(cycle + (["|", *rest] if rest else []))
    return found


def _one_cycle(edges: dict[str, set[str]], component: set[str]) -> list[str]:
    """The shortest path from the component's first module back to itself, inside it."""
    start = min(component)
    paths = {start: [start]}
    todo = [start]
    while todo:
        v = todo.pop(0)
        for w in sorted(edges[v] & component):
            if w == start:
                return paths[v] + [start]
            if w not in paths:
                paths[w] = paths[v] + [w]
                todo.append(w)
    raise AssertionError(f"no cycle in {component}")


@pytest.mark.parametrize("package", ["engine", "proxai"])
def test_no_import_cycles(package):
    found = [c for c in cycles(graph()) if any(m == package or m.startswith(package + ".") for m in c)]
    assert found == [], "import cycles (and the other modules of each circle):\n" + "\n".join(
        "  " + " -> ".join(c[:c.index("|")] if "|" in c else c) + (f"   [also: {', '.join(c[c.index('|') + 1:])}]" if "|" in c else "")
        for c in found)


def test_the_graph_sees_function_level_and_relative_imports(tmp_path):
    # the reader itself: a cycle hidden in a function body, through a relative import, is found
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("def f():\n    from .c import g\n")
    (pkg / "c.py").write_text("import pkg.a\n")
    (pkg / "d.py").write_text("from .a import b\n")
    known = {"pkg", "pkg.a", "pkg.b", "pkg.c", "pkg.d"}
    edges = {name: imports_of(name, pkg / f"{name.partition('.')[2] or '__init__'}.py", known) for name in known}
    assert edges["pkg.b"] == {"pkg.c"} and edges["pkg.c"] == {"pkg.a"} and edges["pkg.d"] == {"pkg.a"}
    assert cycles(edges) == [["pkg.a", "pkg.b", "pkg.c", "pkg.a"]]
