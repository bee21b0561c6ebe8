"""The Interactions API's shapes, checked strictly against the google-genai SDK's own pydantic
types: what a request may carry (CreateModelInteraction) and what the mock may send (Interaction,
InteractionSSEStreamEvent, the error body).

The SDK's models are lenient on purpose (extra fields allowed, unknown `type`s kept as Unknown*
variants, unknown enum strings kept as UnrecognizedStr, "yes" taken for true); the real service is
not, and a mock that accepts anything proves nothing. So a body is validated in strict JSON mode
and the validated tree is then walked for extra fields, unknown variants and unknown enum values.
The model name is the one open string: any name is a model here."""

from __future__ import annotations

import json
import re
import warnings

# The SDK is a test dependency, not the proxy's: without it (demo mode in a bare install) the
# mock still serves, unchecked, rather than failing to import.
try:
    from pydantic import BaseModel, ValidationError

    from google.genai._gaos.errors.createinteraction import CreateInteractionClientErrorData
    from google.genai._gaos.types import interactions as sdk
    from google.genai._gaos.types.basemodel import UnrecognizedStr
except ImportError:  # pragma: no cover - exercised by a subprocess test
    sdk = None

# Stands in for the client's model name while validating (the SDK's Model is a closed list plus
# any string, and strict mode takes only the list).
_KNOWN_MODEL = "gemini-2.5-flash"
_FIELD = re.compile(r"^[a-z_][a-z0-9_]*$")
# The names pydantic gives a union's branches in an error location: not fields.
_BRANCHES = {"str", "int", "float", "bool", "dict", "list", "none", "function-after", "function-before"}


class Invalid(ValueError):
    """A body the real API refuses: `path` names the field, `code` is the API's error code."""

    def __init__(self, path: str, message: str, code: str = "invalid_request") -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path, self.code = path, code


def _dotted(loc) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif isinstance(part, str) and _FIELD.match(part) and part not in _BRANCHES:
            out += ("." if out else "") + part
    return out


def _walk(obj, path: list, found: list) -> None:
    if isinstance(obj, BaseModel):
        if getattr(obj, "is_unknown", False) is True:
            raw = getattr(obj, "raw", None)
            kind = raw.get("type", raw.get("event_type")) if isinstance(raw, dict) else None
            found.append(Invalid(_dotted(path), f"unknown type {kind!r}"))
            return
        for name in obj.__pydantic_extra__ or {}:
            found.append(Invalid(_dotted(path), f'Unknown name "{name}": Cannot find field.', "parameter_unknown"))
        for name, field in type(obj).model_fields.items():
            value = obj.__dict__.get(name)
            key = field.alias or name
            if isinstance(value, UnrecognizedStr) and key != "model":
                found.append(Invalid(_dotted([*path, key]), f"invalid value {str(value)!r}"))
            _walk(value, [*path, key], found)
    elif isinstance(obj, (list, tuple)):
        for i, value in enumerate(obj):
            _walk(value, [*path, i], found)
    elif isinstance(obj, dict):
        for key, value in obj.items():
            _walk(value, [*path, key], found)


def _problems(cls, body) -> list[Invalid]:
    if not isinstance(body, dict):
        return [Invalid("", "the body must be a JSON object")]
    if sdk is None:
        return []
    shaped = dict(body)
    if isinstance(shaped.get("model"), str):
        shaped["model"] = _KNOWN_MODEL
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # the SDK's deprecated fields are still fields
            validated = cls.model_validate_json(json.dumps(shaped), strict=True)
    except ValidationError as e:
        return [Invalid(_dotted(err["loc"]), err["msg"]) for err in e.errors()]
    found: list[Invalid] = []
    _walk(validated, [], found)
    return found


def check_request(body) -> None:
    """Raise Invalid for the first thing the API refuses in a create-interaction body."""
    problems = _problems(sdk and sdk.CreateModelInteraction, body)
    if problems:
        raise problems[0]


def _assert_valid(cls, body, what: str) -> None:
    problems = _problems(cls, body)
    # A bug in the mock must not pass silently: what it sends is what the SDK's types say.
    assert not problems, f"the Interactions mock sent an invalid {what}: {problems[0]} in {body!r}"


def assert_interaction(body: dict) -> None:
    _assert_valid(sdk and sdk.Interaction, body, "Interaction")


def assert_event(event: dict) -> None:
    _assert_valid(sdk and sdk.InteractionSSEStreamEvent, {"data": event}, "event")


def assert_error(body: dict) -> None:
    _assert_valid(sdk and CreateInteractionClientErrorData, body, "error body")
