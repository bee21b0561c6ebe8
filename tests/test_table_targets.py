"""Every table whose values reach a client or a provider declares `to:`, the wire enum
(rules/tables/enums.yaml) its values must belong to, so a wrong value in the table or
in an override of it is a lint and load error."""
from engine.ruleset import BUILTIN_RULES, read_dirs

LAYERED, PROBLEMS = read_dirs([BUILTIN_RULES])
PROTOCOLS = {p.parent.name for p in BUILTIN_RULES.glob("*/protocol.yaml")}
#: the OpenAI vocabulary both OpenAI protocols share (reasoning effort, service tier, error type)
FAMILIES = {"openai"}

#: Wire targets that are no enum in any SDK, so there is nothing to check a value against.
FREE_STRINGS = {
    "http_status->openai.error_type": "the OpenAI SDKs type error.type as a str",
    "ir.role->gemini_generate_content.role": "google.genai types Content.role as a str",
    "ir.audio_format->gemini_generate_content.mime_type": "a MIME type",
}


def _wire_tables():
    for name, (table, _) in LAYERED.tables.items():
        target = name.split("->")[1]
        if target.split(".")[0] not in PROTOCOLS | FAMILIES:
            continue  # an IR value, an HTTP status, a number the rules compute with
        values = [v for v in [*table["map"].values(), table.get("default")] if v is not None]
        if values and all(isinstance(v, int) for v in values):
            continue  # a count (budget_tokens), not an enum
        yield name, table


def test_the_built_in_rules_load():
    assert PROBLEMS == [] and PROTOCOLS


def test_every_table_that_writes_a_wire_value_declares_its_enum():
    undeclared = sorted(name for name, table in _wire_tables() if "to" not in table and name not in FREE_STRINGS)
    assert undeclared == [], "declare `to:` (an enum of rules/tables/enums.yaml) on these tables"


def test_the_free_string_targets_are_still_tables_without_an_enum():
    wire = dict(_wire_tables())
    assert {name for name in FREE_STRINGS if name in wire and "to" not in wire[name]} == set(FREE_STRINGS)


def test_every_declared_target_is_an_enum_and_the_table_names_it():
    for name, (table, _) in LAYERED.tables.items():
        if "to" in table:
            assert table["to"] in LAYERED.enums, name
            # the enum is the target side's, or (errors) the vocabulary that side is written in
            assert table["to"].split(".")[0] == name.split("->")[1].split(".")[0], name
