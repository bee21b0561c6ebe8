"""Duplicate keys and alias bombs, in the config and in rule files."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine import yamlsrc
from proxai.routing.config import load_file
from proxai.http.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent

PROVIDERS = """providers:
  local:
    protocol: openai_chat_completions
    base_url: http://127.0.0.1:9/v1
    api_key: k
"""


def _bomb(levels: int = 9, width: int = 9) -> str:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


def _check_config(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "proxai.tools.cli", "check-config", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)


def test_a_second_server_block_is_refused_not_silently_merged(tmp_path):
    cfg = tmp_path / "proxai.yaml"
    cfg.write_text("server:\n  api_keys: [shared-secret]\n" + PROVIDERS + "server:\n  port: 18081\n")
    with pytest.raises(ConfigError) as info:
        load_file(cfg)
    assert "proxai.yaml:8:1: duplicate key 'server'" in str(info.value)
    result = _check_config(cfg)
    assert result.returncode == 1 and "duplicate key 'server'" in result.stderr and "ok" not in result.stdout


def test_duplicate_keys_nested_anywhere_in_the_config_are_refused(tmp_path):
    cfg = tmp_path / "proxai.yaml"
    cfg.write_text(PROVIDERS + "    api_key: other\n")
    with pytest.raises(ConfigError, match="duplicate key 'api_key'"):
        load_file(cfg)


def test_merge_keys_may_still_be_overridden(tmp_path):
    cfg = tmp_path / "proxai.yaml"
    cfg.write_text("""base: &base
  protocol: openai_chat_completions
  base_url: http://127.0.0.1:9/v1
  api_key: k
""".replace("base: &base", "x-base: &base") + """providers:
  local:
    <<: *base
    api_key: override
""")
    # x-base is an unknown top-level key: the config error is about that, not a duplicate
    with pytest.raises(ConfigError) as info:
        load_file(cfg)
    assert "duplicate" not in str(info.value) and "x-base: unknown key" in str(info.value)


def test_an_alias_bomb_in_the_config_fails_at_once(tmp_path):
    cfg = tmp_path / "proxai.yaml"
    cfg.write_text(_bomb() + PROVIDERS)
    assert len(cfg.read_bytes()) < 2000
    started = time.monotonic()
    result = _check_config(cfg)
    assert result.returncode == 1
    assert "alias bomb" in result.stderr
    assert time.monotonic() - started < 30  # it used to hang


def test_an_alias_bomb_in_a_rule_file_fails_at_once(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "bomb.yaml").write_text("kind: tables\n" + _bomb())
    result = subprocess.run([sys.executable, "-m", "proxai.tools.cli", "lint", str(rules)], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert "alias bomb" in result.stdout + result.stderr


def test_duplicate_keys_in_rule_files_are_problems():
    _doc, duplicates = yamlsrc.load("kind: tables\nkind: codec\n", "x.yaml")
    assert duplicates == [(2, "kind")]


def test_reasonable_aliases_still_load():
    doc = yamlsrc.safe_load_strict("a: &x [1, 2, 3]\nb: *x\nc: {<<: {p: 1}, q: 2}\n")
    assert doc == {"a": [1, 2, 3], "b": [1, 2, 3], "c": {"p": 1, "q": 2}}
    doc, _ = yamlsrc.load(_bomb(levels=3), "ok.yaml")  # 9 * 9 * 9 leaves: fine
    assert len(doc["a2"]) == 9
