"""The Gemini enums the rule tables are total over are google.genai.types' own."""
import re

import pytest
import yaml
from google.genai import types

from engine.ruleset import BUILTIN_RULES

ENUMS = yaml.safe_load((BUILTIN_RULES / "tables" / "enums.yaml").read_text())["enums"]


@pytest.mark.parametrize("name,sdk_enum", [
    ("gemini_generate_content.finish_reason", types.FinishReason),
    ("gemini_generate_content.block_reason", types.BlockedReason),
    ("gemini_generate_content.function_calling_mode", types.FunctionCallingConfigMode),
    ("gemini_generate_content.thinking_level", types.ThinkingLevel),
])
def test_enum_matches_sdk(name, sdk_enum):
    assert ENUMS[name] == [member.value for member in sdk_enum]


def test_no_other_protocol_rule_file_names_gemini():
    """A new protocol is its own rules folder and tables: the other protocols' rule files
    do not mention it."""
    google = {p.parent.name for p in BUILTIN_RULES.glob("*/protocol.yaml")
              if re.search(r"(?m)^family: google\b", p.read_text(encoding="utf-8"))}
    assert google == {"gemini_generate_content", "gemini_interactions"}
    for path in BUILTIN_RULES.glob("*/*.yaml"):
        if path.parent.name not in (*google, "tables"):
            assert "gemini" not in path.read_text(encoding="utf-8").lower(), path
    # The fifth protocol came as its own folder and tables: no other rule file names it.
    for path in BUILTIN_RULES.glob("*/*.yaml"):
        if path.parent.name != "gemini_interactions" and not path.name.startswith("gemini_interactions"):
            assert "interactions" not in path.read_text(encoding="utf-8").lower(), path
    for name in ("anthropic_messages", "openai_chat_completions", "openai_responses", "stop_reasons"):
        assert "gemini" not in (BUILTIN_RULES / "tables" / f"{name}.yaml").read_text(encoding="utf-8").lower()
