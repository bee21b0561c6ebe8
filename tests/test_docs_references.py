"""Every document the rules, code, README and docs/ cite is in the repository.

A reference is a `name.md` path, optionally followed by a section (`§4`, `§6.1`,
a list such as `§1, §5` or a range `§6.1–§6.6`) or numbered items (`#5`, `#4, #7`,
as in `docs/decisions.md #5`). It resolves against the citing file's directory or
the repository root; a section needs a heading with that number, an item a
numbered list entry. A section written without a page (`see §4`) belongs to the
last page named before it on the same line, else to the citing page itself (a
rule file has no sections: there it is an error); `decision #N` without a page is
docs/decisions.md. A Markdown link's `#anchor` must be the slug of a heading of
the page it links to.
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
    r"|[ \t]+(?P<items>#\d+(?:,[ \t]*(?:and[ \t]+)?#\d+)*)\b)?"
)
BARE_SECTION = re.compile(_SECTION)
BARE_DECISION = re.compile(r"\bdecisions?[ \t]+#(?P<item>\d+)\b", re.I)
LINK_ANCHOR = re.compile(r"\]\((?P<path>[^()\s#]*\.md)?#(?P<anchor>[^()\s]+)\)")


def references(text: str):
    """(path, kind, number, line) for every reference in `text`; kind is None, '§' or '#'."""
    for m in REFERENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        if m["sections"]:
            for number in re.findall(r"\d+(?:\.\d+)*", m["sections"]):
                yield m["path"], "§", number, line
        elif m["items"]:
            for number in re.findall(r"\d+", m["items"]):
                yield m["path"], "#", number, line
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


def slug(heading: str) -> str:
    """GitHub's anchor for a heading text."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(text: str) -> set[str]:
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6}[ \t]+(.+?)[ \t]*#*$", text, re.M)}


_PARAGRAPH_START = re.compile(r"\n[ \t]*\n|\n[ \t]*(?:\d+\.|[-*|])[ \t]")


def _context_start(text: str, pos: int, markdown: bool) -> int:
    """Where the text a page-less section belongs with starts: its Markdown paragraph,
    list item or table row; in other files, its line."""
    if not markdown:
        return text.rfind("\n", 0, pos) + 1
    starts = [m.start() for m in _PARAGRAPH_START.finditer(text, 0, pos)]
    return starts[-1] if starts else 0


def dangling_implicit(root: Path, scanned=("rules", "docs")) -> list[str]:
    """Sections without a page, `decision #N` and Markdown anchors that do not resolve."""
    root = root.resolve()
    problems = []
    for citing in scanned_files(root, scanned):
        text = citing.read_text(encoding="utf-8", errors="replace")
        explicit = [m.span() for m in REFERENCE.finditer(text)]
        rel = citing.relative_to(root)
        for m in BARE_SECTION.finditer(text):
            if any(a <= m.start() < b for a, b in explicit):
                continue
            line_no = text.count("\n", 0, m.start()) + 1
            start = _context_start(text, m.start(), citing.suffix == ".md")
            named = [r for r in REFERENCE.finditer(text, start, m.start())]
            number = re.sub(r"\s", "", m.group(0))[1:]
            if named:
                page, label = _resolve(root, citing, named[-1]["path"]), named[-1]["path"]
            elif citing.suffix == ".md":
                page, label = citing, str(rel)
            else:
                problems.append(f"{rel}:{line_no}: §{number}: names no page (write e.g. docs/mappings.md §{number})")
                continue
            if page is not None and not _has_section(page.read_text(encoding="utf-8"), number):
                problems.append(f"{rel}:{line_no}: §{number} (of {label}): no heading numbered {number}")
        for m in BARE_DECISION.finditer(text):
            if any(a <= m.start() < b for a, b in explicit):
                continue
            line_no = text.count("\n", 0, m.start()) + 1
            if not _has_item((root / "docs" / "decisions.md").read_text(encoding="utf-8"), m["item"]):
                problems.append(f"{rel}:{line_no}: decision #{m['item']}: no item numbered {m['item']} in docs/decisions.md")
        if citing.suffix != ".md":
            continue
        for m in LINK_ANCHOR.finditer(text):
            line_no = text.count("\n", 0, m.start()) + 1
            page = _resolve(root, citing, m["path"]) if m["path"] else citing
            if page is not None and m["anchor"] not in _anchors(page.read_text(encoding="utf-8")):
                problems.append(f"{rel}:{line_no}: #{m['anchor']}: no such heading in {page.relative_to(root)}")
    return problems


def test_every_reference_resolves():
    assert dangling(ROOT) == []


def test_every_section_without_a_page_decision_and_anchor_resolves():
    assert dangling_implicit(ROOT) == []


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


@pytest.mark.parametrize(
    "file, text, why",
    [
        ("rules/x.yaml", "a: 1\n# see §4\n", "names no page"),
        ("docs/index.md", "Intro.\n\nSee mappings.md §4 and then §99.\n", "§99 (of mappings.md): no heading numbered 99"),
        ("docs/index.md", "Intro.\n\n- [mappings.md](mappings.md): all concepts\n  (§1 … §42).\n", "no heading numbered 42"),
        ("docs/index.md", "Intro.\n\nAs said in §3.\n", "§3 (of docs/index.md): no heading numbered 3"),
        ("rules/x.yaml", "a: 1\n# as decision #99 says\n", "no item numbered 99 in docs/decisions.md"),
        ("docs/index.md", "Intro.\n\nSee [tools](mappings.md#no-such-heading).\n", "#no-such-heading: no such heading in docs/mappings.md"),
        ("docs/index.md", "Intro.\n\nSee [below](#nowhere).\n", "#nowhere: no such heading in docs/index.md"),
    ],
)
def test_a_dangling_implicit_reference_fails(tmp_path, file, text, why):
    _copy_docs(tmp_path)
    (tmp_path / "rules").mkdir()
    (tmp_path / file).write_text(text)
    problems = dangling_implicit(tmp_path)
    assert len(problems) == 1 and why in problems[0] and problems[0].startswith(f"{file}:"), problems


def test_item_lists_check_every_item(tmp_path):
    _copy_docs(tmp_path)
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "x.yaml").write_text("a: 1\n# docs/decisions.md #4, #99\n")
    problems = dangling(tmp_path, ("rules",))
    assert len(problems) == 1 and "no item numbered 99" in problems[0], problems


def test_valid_implicit_references_pass(tmp_path):
    _copy_docs(tmp_path)
    (tmp_path / "rules").mkdir()
    (tmp_path / "docs" / "index.md").write_text(
        "# Index\n\n## 1. Start\n\nSee [tools](mappings.md#4-tool-definitions) and [up](#1-start), §1 here,\n"
        "streaming.md §6.1–§6.6, and decision #7.\n"
    )
    (tmp_path / "rules" / "x.yaml").write_text("a: 1\n# docs/mappings.md §4 (and §5); decision #3\n")
    assert dangling_implicit(tmp_path) == []
