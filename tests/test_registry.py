"""The construct registry, the loader and the linter agree; v1 idioms fail with what to
write instead, and the migration rewrites them without changing any wire output."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

import engine
from engine import lint, registry, ruleset
from engine.hooks import HOOKS
from engine.migrate import migrate_dirs
from engine.ruleset import BUILTIN_RULES, SCHEMAS

FIXTURES = Path(__file__).parent / "fixtures"
BAD = sorted((FIXTURES / "bad_rules").glob("*.yaml"))
GOOD = sorted((FIXTURES / "good_rules").glob("*.yaml"))


def _load_error(directory: Path) -> str | None:
    try:
        engine.Engine.load(override_dir=directory)
    except engine.RuleError as err:
        return str(err)
    return None


@pytest.mark.parametrize("path", BAD + GOOD, ids=[p.parent.name + "/" + p.stem for p in BAD + GOOD])
def test_lint_and_server_give_the_same_verdict_and_message(path, tmp_path):
    shutil.copy(path, tmp_path / path.name)
    messages = lint.lint_dirs([tmp_path])
    refused = _load_error(tmp_path)
    if path in GOOD:
        assert messages == [] and refused is None, (messages, refused)
        return
    assert messages and refused is not None
    assert messages[0] == refused
    line, text = re.match(r"# expect: (\d+): (.*)", path.read_text().splitlines()[0]).groups()
    assert re.search(rf"{re.escape(path.name)}:{line}: .*{re.escape(text.strip())}", refused), refused


def test_a_v2_override_behaves_as_written(tmp_path):
    shutil.copy(FIXTURES / "good_rules" / "request_v2_idioms.yaml", tmp_path / "r.yaml")
    eng = engine.Engine.load(override_dir=tmp_path)
    ctx = engine.Context("openai_chat_completions", "anthropic_messages")
    out = eng.decode_request(ctx, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stop": "x"})
    assert out == {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}], "_path": "messages[0]"}],
                   "stop": ["x"], "metadata": None}
    assert eng.decode_request(ctx, {"model": "m", "messages": []})["stop"] == []
    with pytest.raises(engine.InvalidRequest) as err:
        eng.decode_request(ctx, {"model": "m", "messages": [], "note": "x"})
    assert (err.value.message, err.value.param) == ("note cannot be sent to this provider", "note")


def test_a_literal_tag_loads_as_plain_data():
    doc, _ = engine.yamlsrc.load('a: !lit function\nb: !lit ""\nc: !lit 0\nd: !lit "0"\ne: !lit [x, 1]\nf: !lit {k: v}\n', "t.yaml")
    assert {k: dict(v) for k, v in doc.items()} == {"a": {"$lit": "function"}, "b": {"$lit": ""}, "c": {"$lit": 0},
                                                    "d": {"$lit": "0"}, "e": {"$lit": ["x", 1]}, "f": {"$lit": {"k": "v"}}}


def test_template_schema_is_generated_from_the_registry():
    on_disk = json.loads((SCHEMAS / "templates.schema.json").read_text(encoding="utf-8"))
    assert on_disk == registry.template_schema(), "run: proxai lint --write-schema"
    rules = json.loads((SCHEMAS / "rules.schema.json").read_text(encoding="utf-8"))
    assert rules["$defs"]["template"]["$ref"] == "templates.schema.json"
    for name, entry in registry.CONSTRUCTS.items():
        assert set(on_disk["$defs"][f"construct{name}"]["properties"]) == {name, *entry.options}


def test_the_schema_alone_refuses_what_the_compiler_refuses(tmp_path):
    # Validated on load: a file the schema refuses never reaches the compiler, and its
    # message is the registry's wording.
    for body, problem in (("{$mapp: x}", "unknown construct '$mapp'"), ("{$map: x, $flat: 1}", "$flat takes true or false, not int"),
                          ("{$map: x, as: y}", "$map does not take as")):
        src = tmp_path / "x.yaml"
        src.write_text(f"kind: request.decode\nprotocol: openai_chat_completions\noutput:\n  m: {body}\n")
        errors = list(ruleset.rules_validator().iter_errors(engine.yamlsrc.load(src.read_text(), "x.yaml")[0]))
        assert errors, body
        _, problems = ruleset.read_file(src)
        assert [p.problem.split(" (known")[0] for p in problems] == [problem], problems


def test_children_walks_templates_by_the_registry_kinds():
    doc, _ = engine.yamlsrc.load(
        "t: {$map: xs, $as: {$let: {y: a}, $in: [b, {$lit: c}, {$table: T, $of: d}]}, $where: e}\n", "t.yaml")

    def walk(node, bound=()):
        if isinstance(node, str):
            yield node, bound
        for child, _, _, names in registry.children(node):
            yield from walk(child, (*bound, *names))

    assert sorted(walk(doc["t"])) == [("a", ("parent", "index")), ("b", ("parent", "index", "y")),
                                      ("d", ("parent", "index", "y")), ("e", ("parent", "index")), ("xs", ())]


def test_every_registered_hook_is_used_by_a_built_in_rule():
    text = "\n".join(p.read_text(encoding="utf-8") for p in ruleset.rule_files(BUILTIN_RULES))
    unused = sorted(name for name in HOOKS if not re.search(rf"(?<![\w.]){re.escape(name)}(?![\w.])", text))
    assert unused == []


def test_rules_readme_lists_every_construct():
    readme = (BUILTIN_RULES / "README.md").read_text(encoding="utf-8")
    for name, entry in registry.CONSTRUCTS.items():
        options = ", ".join(f"`{o}`" for o in entry.options) or "-"
        assert f"| `{name}` | {options} | {entry.summary} |" in readme, name


# --- migration -------------------------------------------------------------------------------


def _v1_files(directory: Path) -> list[str]:
    found: list = []
    ruleset.load_rules(directory, builtin_dir=directory, found=found)
    return sorted({i.where.rpartition(":")[0] for i in found})


def test_shipped_rules_outside_the_tolerated_kinds_are_v2():
    found: list = []
    ruleset.load_rules(found=found)
    kinds = {ruleset.read_file(Path(i.where.rpartition(":")[0]))[0].doc["kind"] for i in found}
    assert kinds <= ruleset.V1_TOLERATED_KINDS
    # ...and the tolerance is still needed: remove a kind from V1_TOLERATED_KINDS once its files are migrated.
    assert kinds == ruleset.V1_TOLERATED_KINDS


@pytest.fixture(scope="module")
def migrated(tmp_path_factory):
    """A copy of the built-in rules, migrated (twice: the second run must change nothing)."""
    root = tmp_path_factory.mktemp("migrated")
    shutil.copytree(BUILTIN_RULES, root / "rules")
    before = {p.name + str(p.parent): p.read_text(encoding="utf-8") for p in ruleset.rule_files(root / "rules")}
    changed, problems = migrate_dirs([root / "rules"])
    assert problems == []
    assert bool(changed) == bool(ruleset.V1_TOLERATED_KINDS)
    again, _ = migrate_dirs([root / "rules"])
    assert again == {}
    return root / "rules", before


def test_migration_keeps_comments_and_layout(migrated):
    directory, before = migrated
    for path in ruleset.rule_files(directory):
        old, new = before[path.name + str(path.parent)], path.read_text(encoding="utf-8")
        assert [l for l in old.splitlines() if l.lstrip().startswith("#")] == [l for l in new.splitlines() if l.lstrip().startswith("#")]
        assert len(old.splitlines()) == len(new.splitlines())
        assert "\"'" not in new, path
    assert _v1_files(directory) == []


def test_migrated_rules_load_as_v2_and_translate_byte_for_byte(migrated, monkeypatch):
    # The golden-file checks, run on an engine built from the migrated copy, v1 refused everywhere.
    import test_golden
    from golden import generate as G

    directory, _ = migrated
    monkeypatch.setattr(ruleset, "V1_TOLERATED_KINDS", frozenset())
    monkeypatch.setattr(G, "_ENGINE", engine.Engine.load(builtin_dir=directory))
    test_golden.test_codec_fixtures_and_client_recordings_wire_output_is_unchanged()
    test_golden.test_recorded_corpus_wire_output_is_unchanged()


def test_v1_stream_override_is_refused_although_builtin_streams_are_tolerated(tmp_path):
    shutil.copy(FIXTURES / "bad_rules" / "v1_stream_literal.yaml", tmp_path / "s.yaml")
    assert "write !lit message_stop" in (_load_error(tmp_path) or "")


def test_lint_cli_migrates_a_directory(tmp_path, capsys):
    (tmp_path / "r.yaml").write_text(
        "kind: response.encode  # a comment\nprotocol: openai_chat_completions\noutput:\n"
        "  object: \"'chat.completion'\"   # kept\n  logprobs: {$nullable: \"`null`\"}\n"
        "  x: {$if: a, $then: {$error: \"bad\"}}\n")
    assert lint.main(["--migrate", str(tmp_path)]) == 0
    assert (tmp_path / "r.yaml").read_text() == (
        "kind: response.encode  # a comment\nprotocol: openai_chat_completions\noutput:\n"
        "  object: !lit chat.completion   # kept\n  logprobs: {$nullable: null}\n"
        "  x: {$if: a, $then: {$fail: \"bad\"}}\n")
    assert lint.main([str(tmp_path)]) == 0
