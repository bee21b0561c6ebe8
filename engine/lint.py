"""``proxai lint [DIR ...]``: the rule files checked exactly as the server loads them.

The linter is the loader (:func:`engine.ruleset.load_rules`): schema validation,
the cross-file checks of :mod:`engine.checks` and the compiler, over the built-in
rules with ``DIR`` layered on top (as ``rules_dir``). Each problem is printed as
``file:line: problem``, every problem of every file (a file that fails to compile is
compiled again part by part, :mod:`engine.diagnose`); the server refuses to start on
the first of them.

``--migrate DIR ...`` rewrites the v1 idioms of those files in place (see
:mod:`engine.migrate`); ``--write-schema`` regenerates
schemas/templates.schema.json (the template language) from the construct registry.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from .ruleset import BUILTIN_RULES, SCHEMAS, load_rules, rule_files


def lint_dirs(dirs: list[Path]) -> list[str]:
    messages: list[str] = []
    for directory in dirs:
        directory = Path(directory)
        if not directory.is_dir():
            messages.append(f"{directory}: not a directory")
            continue
        _, problems = load_rules(directory)
        messages.extend(str(p) for p in problems)
    return list(dict.fromkeys(messages))


def write_schema() -> Path:
    from .registry import template_schema

    path = SCHEMAS / "templates.schema.json"
    path.write_text(json.dumps(template_schema(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "--write-schema" in args:
        print(f"wrote {write_schema()}")
        return 0
    if "--migrate" in args:
        from .migrate import migrate_dirs

        dirs = [Path(a) for a in args if a != "--migrate"]
        if not dirs:
            print("proxai lint --migrate: name the rules directories to rewrite", file=sys.stderr)
            return 2
        changed, problems = migrate_dirs(dirs)
        for file, count in changed.items():
            print(f"{file}: {count} v1 idiom(s) rewritten")
        for problem in problems:
            print(problem)
        if not changed:
            print("nothing to migrate")
        return 1 if problems else 0
    dirs = [Path(a) for a in args] or [BUILTIN_RULES]
    messages = lint_dirs(dirs)
    for message in messages:
        print(message)
    if messages:
        print(f"{len(messages)} problem(s)", file=sys.stderr)
        return 1
    count = sum(len(rule_files(d)) for d in dirs if Path(d).is_dir())
    print(f"ok: {count} rule file(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
