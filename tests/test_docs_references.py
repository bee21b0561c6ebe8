"""Every document the rules, code, README and docs/ cite is in the repository.

A reference is a `name.md` path, optionally followed by a section (`§4`, `§6.1`,
a list such as `§1, §5`) or a numbered item (`#5`, as in `docs/decisions.md #5`).
It resolves against the citing file's directory or the repository root; a
section needs a heading with that number, an item a numbered list entry.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("rules", "engine", "proxai", "docs", "README.md")
TEXT_SUFFIXES = {".py", ".yaml", ".yml", ".md", ".json", ".js", ".html", ".toml"}

# A section or item may follow on the next comment line ("docs/mappings.md\n  # §9").
_SEP = r"`?[ \t]*(?:\n[ \t]*#?[ \t]*)?"
_SECTION = r"§[ \t]?\d+(?:\.\d+)*"
REFERENCE = re.compile(
    r"(?<![\w/.:-])(?P<path>[\w-][\w./-]*\.md)\b"
    r"(?:" + _SEP + r"(?P<sections>" + _SECTION + r"(?:,[ \t]*(?:and[ \t]+)?" + _SECTION + r")*)"
    r"|[ \t]+#(?P<item>\d+)\b)?"
)


def references(text: str):
    """(path, kind, number, line) for every reference in `text`; kind is None, '§' or '#'."""
    for m in REFERENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        if m["sections"]:
            for number in re.findall(r"\d+(?:\.\d+)*", m["sections"]):
                yield m["path"], "§", number, line
        elif m["item"]:
            yield m["path"], "#", m["item"], line
        else:
            yield m["path"], None, None, line


def _resolve(root: Path, citing: Path, path: str) -> Path | None:
    for base in (citing.parent, root):
        candidate = (base / path).resolve()
        if candidate.is_file() and candidate.is_relative_to(root):
            return candidate
    return None


def _has_section(text: str, number: str) -> bool:
    return re.search(r"^#{1,6}[ \t]+" + re.escape(number) + r"(?:\.?[ \t]|\.?$)", text, re.M) is not None


def _has_item(text: str, number: str) -> bool:
    return re.search(r"^(?:#{1,6}[ \t]+)?" + re.escape(number) + r"\.[ \t]", text, re.M) is not None


def scanned_files(root: Path, scanned=SCANNED):
    for name in scanned:
        top = root / name
        if top.is_file():
            yield top
        elif top.is_dir():
            yield from sorted(p for p in top.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)


def dangling(root: Path, scanned=SCANNED) -> list[str]:
    """One message per reference that does not resolve, as `file:line: reference: why`."""
    root = root.resolve()
    problems = []
    for citing in scanned_files(root, scanned):
        text = citing.read_text(encoding="utf-8", errors="replace")
        for path, kind, number, line in references(text):
            where = f"{citing.relative_to(root)}:{line}: {path}{f' {kind}{number}' if kind else ''}"
            target = _resolve(root, citing, path)
            if target is None:
                problems.append(f"{where}: no such file in the repository")
            elif kind == "§" and not _has_section(target.read_text(encoding="utf-8"), number):
                problems.append(f"{where}: no heading numbered {number}")
            elif kind == "#" and not _has_item(target.read_text(encoding="utf-8"), number):
                problems.append(f"{where}: no item numbered {number}")
    return problems


def test_every_reference_resolves():
    assert dangling(ROOT) == []


def test_rules_cite_the_docs():
    # The rule files are where users meet these references: they must be found.
    cited = {path for f in scanned_files(ROOT, ("rules",)) for path, *_ in references(f.read_text(encoding="utf-8"))}
    assert {"docs/mappings.md", "docs/streaming.md", "docs/decisions.md"} <= cited


def _copy_docs(root: Path):
    (root / "docs").mkdir()
    for page in (ROOT / "docs").glob("*.md"):
        (root / "docs" / page.name).write_text(page.read_text())


@pytest.mark.parametrize(
    "comment, why",
    [
        ("# see mappings.md §4", "no such file"),
        ("# see docs/nowhere.md", "no such file"),
        ("# see docs/mappings.md §99", "no heading numbered 99"),
        ("# see docs/mappings.md §1, §42", "no heading numbered 42"),
        ("# see docs/streaming.md §6.9", "no heading numbered 6.9"),
        ("# see docs/decisions.md #99", "no item numbered 99"),
        ("# see docs/mappings.md\n  # §77", "no heading numbered 77"),
        ("# see `docs/streaming.md` §8", "no heading numbered 8"),
    ],
)
def test_a_dangling_reference_fails(tmp_path, comment, why):
    _copy_docs(tmp_path)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "x.yaml").write_text(f"a: 1\n{comment}\n")
    problems = dangling(tmp_path, ("rules",))
    assert len(problems) == 1 and why in problems[0] and problems[0].startswith("rules/x.yaml:2:"), problems


def test_valid_references_pass(tmp_path):
    _copy_docs(tmp_path)
    (tmp_path / "docs" / "index.md").write_text("See mappings.md §16 and `streaming.md` §6.6.\n")
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "x.yaml").write_text(
        "# docs/mappings.md §1, §5, §9, §14; docs/decisions.md #14 and docs/streaming.md §6.1\n"
    )
    assert dangling(tmp_path, ("rules", "docs/index.md")) == []
