"""The compiled rules kept across processes (engine/cache.py): an unchanged set of rule
files loads from its entry without reading, checking or compiling a rule; a changed
rule file, a changed rules_dir or a broken entry compiles as before and rewrites the
entry; the engine loaded from an entry translates byte for byte as a compiled one."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import engine
from engine import cache, codegen, ruleset
from golden import generate as G

TOY = Path(__file__).parent / "fixtures" / "protocols"


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    directory = tmp_path / "cache"
    monkeypatch.setenv("PROXAI_RULES_CACHE", str(directory))
    return directory


@pytest.fixture
def builtin(tmp_path):
    """A copy of the built-in rules, to change."""
    return Path(shutil.copytree(ruleset.BUILTIN_RULES, tmp_path / "rules"))


@pytest.fixture
def toy(tmp_path):
    """A rules_dir that adds a protocol with a hooks module of its own, to change."""
    return Path(shutil.copytree(TOY, tmp_path / "protocols"))


@pytest.fixture
def compiles(monkeypatch):
    """How often the rule files were read and checked, and how many functions were generated."""
    count = {"read": 0, "generated": 0}
    read_dirs, define = ruleset.read_dirs, codegen.Generator.define

    def counting_read(*args, **kw):
        count["read"] += 1
        return read_dirs(*args, **kw)

    def counting_define(self, *args, **kw):
        count["generated"] += 1
        return define(self, *args, **kw)

    monkeypatch.setattr(ruleset, "read_dirs", counting_read)
    monkeypatch.setattr(codegen.Generator, "define", counting_define)
    return count


def _load(override=None, builtin_dir=None):
    rules, problems = ruleset.load_rules(override, builtin_dir)
    assert problems == []
    return rules


def _engine(rules) -> engine.Engine:
    return engine.Engine(rules.codecs, rules.streams, rules.tables, rules.enums, rules.protocols)


def _entries(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.pickle"))


def test_the_same_files_load_from_the_entry_without_reading_checking_or_compiling(cache_dir, builtin, compiles):
    first = _load(builtin_dir=builtin)
    assert compiles["read"] == 1 and compiles["generated"] > 100
    assert len(_entries(cache_dir)) == 1
    generated = compiles["generated"]

    again = _load(builtin_dir=builtin)
    assert compiles == {"read": 1, "generated": generated}   # no YAML, no schema, no codegen
    assert again is not first
    assert set(again.codecs) == set(first.codecs) and set(again.streams) == set(first.streams)
    assert set(again.protocols) == set(first.protocols) and set(again.tables) == set(first.tables)


def test_a_changed_rule_file_is_a_miss_that_compiles_and_writes_its_own_entry(cache_dir, builtin, compiles):
    _load(builtin_dir=builtin)
    table_file = next((builtin / "tables").glob("*.yaml"))
    table_file.write_bytes(table_file.read_bytes() + b"\n# one byte more\n")
    _load(builtin_dir=builtin)
    assert compiles["read"] == 2
    assert len(_entries(cache_dir)) == 2
    _load(builtin_dir=builtin)   # the changed files now hit their own entry
    assert compiles["read"] == 2


def test_a_changed_rules_dir_is_a_miss_and_its_rules_take_effect(cache_dir, toy, compiles):
    table = "ir.stop->toy_chat.end"
    assert _load(toy).tables[table].lookup("tool_use") == "done"
    tables = toy / "toy_chat" / "tables.yaml"
    tables.write_text(tables.read_text().replace("tool_use: done", "tool_use: limit"))
    changed = _load(toy)
    assert compiles["read"] == 2
    assert changed.tables[table].lookup("tool_use") == "limit"
    assert _load(toy).tables[table].lookup("tool_use") == "limit"   # from the entry
    assert compiles["read"] == 2


def test_a_changed_hooks_module_of_a_rules_dir_is_a_miss(cache_dir, toy, compiles):
    _load(toy)
    hooks = toy / "toy_chat" / "hooks.py"
    hooks.write_text(hooks.read_text() + "\n# changed\n")
    _load(toy)
    assert compiles["read"] == 2


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_broken_entry_is_a_miss_and_is_rewritten_whole(cache_dir, builtin, compiles, damage):
    _load(builtin_dir=builtin)
    [entry] = _entries(cache_dir)
    whole = entry.read_bytes()
    entry.write_bytes({"truncated": whole[: len(whole) // 2], "garbage": b"not a pickle" * 100, "empty": b""}[damage])
    rules = _load(builtin_dir=builtin)
    assert compiles["read"] == 2
    assert set(rules.codecs) and cache.load(entry.stem) is not None
    assert not [p for p in cache_dir.iterdir() if p.name.startswith(".tmp-")]
    _load(builtin_dir=builtin)
    assert compiles["read"] == 2


def test_an_entry_written_for_other_files_under_this_name_is_a_miss(cache_dir, builtin, toy, compiles):
    _load(builtin_dir=builtin)
    [entry] = _entries(cache_dir)
    name = cache.key(ruleset.rule_dirs(toy, builtin), __import__("engine.registry").registry.HOOKS,
                     ruleset.rule_files, ruleset.SCHEMAS)
    (cache_dir / f"{name}.pickle").write_bytes(entry.read_bytes())   # the built-in rules' entry, renamed
    rules = _load(toy, builtin)
    assert compiles["read"] == 2 and "toy_chat" in rules.protocols


@pytest.mark.parametrize("setting", ["off", "file"])
def test_the_cache_off_or_unwritable_loads_as_before(tmp_path, monkeypatch, builtin, compiles, setting):
    target = tmp_path / "a-file"
    target.write_text("not a directory")
    monkeypatch.setenv("PROXAI_RULES_CACHE", "off" if setting == "off" else str(target / "rules"))
    _load(builtin_dir=builtin)
    _load(builtin_dir=builtin)
    assert compiles["read"] == 2
    assert target.read_text() == "not a directory"


def test_the_default_directory_is_under_the_user_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("PROXAI_RULES_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache.directory() == tmp_path / "proxai" / "rules"


def _golden_lines(eng, cases) -> list[dict]:
    """The golden files' lines, and the same cases toward the protocols they do not cover
    (generateContent, Interactions: a folder whose hooks module brings stream state objects)."""
    saved = G._ENGINE
    G._ENGINE = eng
    try:
        others = sorted(set(eng.protocols) - set(G.PROTOCOLS))
        extra = [{"case": case["id"], "to": target, **G.translate(case["kind"], case["source"], target, *G.case_inputs(case))}
                 for case in cases if case["kind"] in ("request", "response", "stream") for target in others]
        return [*G.codec_lines(cases), *G.corpus_lines(), *extra]
    finally:
        G._ENGINE = saved


def test_the_engine_from_an_entry_translates_golden_cases_byte_for_byte(cache_dir, builtin, compiles):
    compiled = _engine(_load(builtin_dir=builtin))
    cached = _engine(_load(builtin_dir=builtin))
    assert compiles["read"] == 1, "the second engine did not come from the entry"
    cases = G.read_cases()
    # every kind and source protocol, some cases of each
    picked = [c for i, c in enumerate(cases) if i % 7 == 0 or c["kind"] in ("stream", "ir_stream")]
    want = _golden_lines(compiled, picked)
    assert len(want) > 500 and any("error" in line for line in want) and any("wire" in line for line in want)
    assert any(line["to"] == "gemini_interactions" and "wire" in line for line in want)
    assert _golden_lines(cached, picked) == want


def test_a_rules_dir_protocol_with_its_own_hooks_translates_the_same_from_the_entry(cache_dir, toy, compiles):
    body = {"model": "m", "messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}
    image = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}]}]}
    out = []
    for _ in range(2):
        eng = _engine(_load(toy))
        ctx = engine.Context("openai_chat_completions", "toy_chat", provider_name="p")
        with pytest.raises(engine.InvalidRequest) as refused:   # the folder's own hook refuses it
            eng.translate_request(ctx, image)
        out.append((eng.translate_request(ctx, body), refused.value.message, refused.value.param))
    assert compiles["read"] == 1
    assert out[0] == out[1]
    assert "Toy Talk" in out[0][1]


def test_a_new_process_loads_the_entry(cache_dir, builtin):
    """Across processes, the point of the cache: the second process finds the first's entry."""
    script = ("import sys, engine; from engine import ruleset\n"
              "calls = []\n"
              "read = ruleset.read_dirs\n"
              "ruleset.read_dirs = lambda *a, **k: calls.append(1) or read(*a, **k)\n"
              f"engine.Engine.load(builtin_dir={str(builtin)!r})\n"
              "print(len(calls))\n")
    env = {**os.environ, "PROXAI_RULES_CACHE": str(cache_dir)}
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                           cwd=Path(__file__).parent.parent) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert [r.stdout.strip() for r in runs] == ["1", "0"]


def test_module_level_objects_come_back_as_themselves(cache_dir, builtin):
    """Generated code tests ``is MISS`` / ``is NULL`` and reads the shared option table: from an
    entry they must be the engine's own objects, not copies."""
    from engine import expr, scope

    _load(builtin_dir=builtin)
    rules = _load(builtin_dir=builtin)
    generated = [c.first_reject for c in rules.codecs.values() if c.first_reject is not None]
    assert generated
    for fn in generated:
        env = fn.__globals__
        assert env["MISS"] is scope.MISS and env["NULL"] is scope.NULL and env["OPTIONS"] is expr.OPTIONS
        assert env["Scope"] is scope.Scope


def test_another_working_directory_is_a_miss(cache_dir, builtin, compiles, tmp_path, monkeypatch):
    """Errors name a rule's file relative to the working directory, so an entry is per directory."""
    _load(builtin_dir=builtin)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    rules = _load(builtin_dir=builtin)
    assert compiles["read"] == 2
    fn = rules.codecs[("request.decode", "openai_chat_completions")].first_reject
    assert fn.__code__.co_filename.startswith("<conditions ../rules/openai_chat_completions/request.decode.yaml")


def test_a_directory_others_may_write_to_is_not_used(cache_dir, builtin, compiles):
    """An entry is code the loader runs: a cache directory writable by others is ignored."""
    _load(builtin_dir=builtin)
    assert len(_entries(cache_dir)) == 1 and cache_dir.stat().st_mode & 0o077 == 0   # created private
    cache_dir.chmod(0o777)
    _load(builtin_dir=builtin)
    assert compiles["read"] == 2
    cache_dir.chmod(0o700)
    _load(builtin_dir=builtin)
    assert compiles["read"] == 2
