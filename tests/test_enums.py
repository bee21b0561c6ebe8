"""The enums rule tables are total over must match the installed SDKs' own types."""
import typing

import pytest
import yaml
from anthropic.types import OutputConfigParam, StopReason
from anthropic.types.shared.error_type import ErrorType
from openai.types.chat.chat_completion import Choice
from openai.types.responses.response import IncompleteDetails
from openai.types.responses.response_status import ResponseStatus
from openai.types.shared.reasoning_effort import ReasoningEffort

from engine.ruleset import BUILTIN_RULES

ENUMS = yaml.safe_load((BUILTIN_RULES / "tables" / "enums.yaml").read_text())["enums"]


def literal_values(tp) -> set:
    out = set()
    for arg in typing.get_args(tp):
        if arg is type(None):
            continue
        out |= literal_values(arg) if typing.get_args(arg) else {arg}
    return out


@pytest.mark.parametrize("name,sdk_type,extra", [
    ("anthropic_messages.stop_reason", StopReason, set()),
    ("openai_chat_completions.finish_reason", Choice.model_fields["finish_reason"].annotation, set()),
    ("openai.reasoning_effort", ReasoningEffort, set()),
    ("anthropic_messages.effort", typing.get_type_hints(OutputConfigParam)["effort"], set()),
    # decisions.md #10: 413 uses request_too_large, which the SDK enum lacks.
    ("anthropic_messages.error_type", ErrorType, {"request_too_large"}),
])
def test_enum_matches_sdk(name, sdk_type, extra):
    assert set(ENUMS[name]) == literal_values(sdk_type) | extra


def test_responses_status_enum_covers_status_and_incomplete_reasons():
    reasons = literal_values(IncompleteDetails.model_fields["reason"].annotation)
    expected = literal_values(ResponseStatus) | {f"incomplete:{r}" for r in reasons}
    assert set(ENUMS["openai_responses.status"]) == expected
