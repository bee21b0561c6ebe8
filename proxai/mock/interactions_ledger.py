"""What the Interactions mock remembers, and the rules across requests it enforces with it, as
the real API does:

* `previous_interaction_id` names an interaction this mock served and stored, else 404
  not_found (an id from elsewhere, or one served with `store: false`, or deleted).
* A `thought` step in the input carries a signature this mock issued, byte for byte, else 400
  (the signature is opaque state only its issuer can read).
* A `function_result` names the `call_id` of a `function_call` step earlier in the input or in
  the interactions it continues, else 400.
* `background: true` answers at once, in_progress; the interaction is finished by the first GET
  (or cancelled by POST .../cancel)."""

from __future__ import annotations

from dataclasses import dataclass, field

from . import interactions_schema
from .interactions_schema import Invalid


# An input list of these is content (one user turn); any other list is steps.
CONTENT_TYPES = ("text", "image", "audio", "document", "video")


class NotFound(LookupError):
    pass


@dataclass
class Served:
    resource: dict  # the finished Interaction
    input: list  # the request's input as steps
    events: list = field(default_factory=list)  # [(event_type, data)] as streamed (a GET may replay them)
    pending: bool = False  # a background run not yet finished


def input_steps(body: dict) -> list:
    """The input as a list of steps: a string is one user_input, a list of content one
    user_input holding it."""
    value = body.get("input")
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "user_input", "content": [{"type": "text", "text": value}]}]
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        if all(v.get("type") in CONTENT_TYPES for v in value):
            return [{"type": "user_input", "content": list(value)}] if value else []
        return list(value)
    return []


class InteractionLedger:
    def __init__(self) -> None:
        self.served: dict[str, Served] = {}
        self.signatures: set[str] = set()

    def clear(self) -> None:
        self.served.clear()
        self.signatures.clear()

    def get(self, ident: str) -> Served:
        served = self.served.get(ident)
        if served is None:
            raise NotFound(f"Interaction '{ident}' not found.")
        return served

    def _chain(self, ident: str | None) -> list:
        """Every step (input and output) of `ident` and the interactions before it."""
        out, seen = [], set()
        while ident and ident not in seen and ident in self.served:
            seen.add(ident)
            served = self.served[ident]
            out = served.input + list(served.resource.get("steps") or []) + out
            ident = served.resource.get("previous_interaction_id")
        return out

    def check(self, body: dict) -> None:
        """Raise Invalid (400) or NotFound (404) for what the API refuses in a create request."""
        interactions_schema.check_request(body)
        if body.get("background") is True and body.get("store") is False:
            raise Invalid("store", "a background interaction is stored: `store: false` cannot be used with `background: true`")
        previous = body.get("previous_interaction_id")
        if previous is not None:
            self.get(previous)
        calls = {s.get("id") for s in self._chain(previous) if s.get("type") == "function_call"}
        for i, step in enumerate(input_steps(body) if isinstance(body.get("input"), list) else []):
            kind = step.get("type")
            if kind == "thought" and step.get("signature") not in self.signatures:
                where = f"input[{i}].signature"
                if step.get("signature") is None:
                    raise Invalid(where, "a thought step needs the signature it was returned with")
                raise Invalid(where, "Thought signature is not valid.")
            if kind == "function_call":
                calls.add(step.get("id"))
            if kind == "function_result" and step.get("call_id") not in calls:
                raise Invalid(f"input[{i}].call_id",
                              f"no function_call with id {step.get('call_id')!r} precedes this function_result")

    def record(self, body: dict, resource: dict, events: list | None = None, pending: bool = False) -> None:
        for step in resource.get("steps") or []:
            if step.get("type") == "thought" and step.get("signature"):
                self.signatures.add(step["signature"])
        for _, event in events or []:
            delta = event.get("delta") if isinstance(event, dict) else None
            if isinstance(delta, dict) and delta.get("type") == "thought_signature" and delta.get("signature"):
                self.signatures.add(delta["signature"])
        if body.get("store") is False:
            return
        self.served[resource["id"]] = Served(resource, input_steps(body), list(events or []), pending)

    def delete(self, ident: str) -> None:
        self.get(ident)
        del self.served[ident]

    def finish(self, ident: str) -> Served:
        """A GET: a background run is done by now."""
        served = self.get(ident)
        served.pending = False
        return served

    def cancel(self, ident: str) -> dict:
        served = self.get(ident)
        if not served.pending:
            raise Invalid("id", f"Interaction '{ident}' is not in progress and cannot be cancelled.")
        served.pending = False
        served.resource = {**served.resource, "status": "cancelled", "steps": []}
        served.resource.pop("usage", None)
        return served.resource
