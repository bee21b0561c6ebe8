"""The enums rule tables are total over must match the installed SDKs' own types."""
import typing

import pytest
import yaml
from anthropic.types import MessageParam, OutputConfigParam, RefusalStopDetails
from anthropic.types.beta.beta_stop_reason import BetaStopReason
from anthropic.types.shared.error_type import ErrorType
from openai.types.chat.chat_completion import ChatCompletion, Choice
from openai.types.responses.response import IncompleteDetails
from openai.types.responses.response_error import ResponseError
from openai.types.responses.response_status import ResponseStatus
from openai.types.responses.service_tier import ServiceTier
from openai.types.shared.reasoning import Reasoning
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
    # The beta endpoint's: a superset (compaction, for context management).
    ("anthropic_messages.stop_reason", BetaStopReason, set()),
    ("openai_chat_completions.finish_reason", Choice.model_fields["finish_reason"].annotation, set()),
    ("openai.reasoning_effort", ReasoningEffort, set()),
    ("anthropic_messages.effort", typing.get_type_hints(OutputConfigParam)["effort"], set()),
    # decisions.md #10: 413 uses request_too_large, which the SDK enum lacks.
    ("anthropic_messages.error_type", ErrorType, {"request_too_large"}),
    ("anthropic_messages.role", typing.Union[tuple(typing.get_type_hints(m)["role"] for m in typing.get_args(MessageParam))], set()),
    ("anthropic_messages.refusal_category", RefusalStopDetails.model_fields["category"].annotation, set()),
    ("openai.reasoning_summary", Reasoning.model_fields["summary"].annotation, set()),
    ("openai_chat_completions.service_tier", ChatCompletion.model_fields["service_tier"].annotation, set()),
    ("openai_responses.service_tier", ServiceTier, set()),
    # What the API sends in a stream's error event when the quota is spent (rules/tables/openai_responses.yaml).
    ("openai_responses.error_code", ResponseError.model_fields["code"].annotation, {"insufficient_quota"}),
])
def test_enum_matches_sdk(name, sdk_type, extra):
    assert set(ENUMS[name]) == literal_values(sdk_type) | extra


def test_responses_status_enum_covers_status_and_incomplete_reasons():
    reasons = literal_values(IncompleteDetails.model_fields["reason"].annotation)
    expected = literal_values(ResponseStatus) | {f"incomplete:{r}" for r in reasons}
    assert set(ENUMS["openai_responses.status"]) == expected
