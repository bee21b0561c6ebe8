"""`proxai lint`: every check, each caught on the right line of a deliberately broken file."""
import re
import shutil
from pathlib import Path

import pytest

from engine import lint
from engine.ruleset import BUILTIN_RULES

BAD = Path(__file__).parent / "fixtures" / "bad_rules"
CASES = sorted(BAD.glob("*.yaml"))


def _expectation(path: Path):
    line, text = re.match(r"# expect: (\d+): (.*)", path.read_text().splitlines()[0]).groups()
    return int(line), text.strip()


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_each_broken_file_is_caught_on_its_line(path, tmp_path):
    shutil.copy(path, tmp_path / path.name)
    messages = lint.lint_dirs([tmp_path])
    line, text = _expectation(path)
    expected_prefix = f"{path.name}:{line}: "
    hits = [m for m in messages if m.split("/")[-1].startswith(expected_prefix) and text in m]
    assert hits, f"expected '{expected_prefix}...{text}' in {messages}"


def test_builtin_rules_are_clean(capsys):
    assert lint.main([str(BUILTIN_RULES)]) == 0
    assert "ok:" in capsys.readouterr().out


def test_exit_status_and_format_on_problems(tmp_path, capsys):
    shutil.copy(BAD / "unknown_hook.yaml", tmp_path / "x.yaml")
    assert lint.main([str(tmp_path)]) == 1
    out = capsys.readouterr().out.strip().splitlines()
    assert out and all(re.match(r"^.+\.yaml:\d+: .+", line) for line in out)


def test_override_is_linted_layered_over_builtin(tmp_path):
    # A partial table entry is total once layered over the built-in table.
    (tmp_path / "stop.yaml").write_text(
        "kind: tables\ntables:\n  - name: ir.stop->openai_chat_completions.finish_reason\n"
        "    from: ir.stop\n    map:\n      pause_turn: length\n")
    assert lint.lint_dirs([tmp_path]) == []


def test_missing_directory_is_a_problem(tmp_path):
    assert lint.main([str(tmp_path / "nope")]) == 1
