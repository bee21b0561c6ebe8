"""What the proxy's server-side state needs to know of a client protocol: its descriptor's
`state:` section (rules/<protocol>/protocol.yaml), read once into a StateSpec.

The same mechanism (proxai/endpoints/responses_state.py) serves every protocol that has
one: the request field naming the turn continued (`previous_response_id`,
`previous_interaction_id`), the store switch, the input field and how a string or a list
of content parts becomes input items, the stored resource's output field (`output`,
`steps`), its client paths, and the stream events carrying its snapshot.
"""

from __future__ import annotations

import copy
import functools
import re
import uuid
from dataclasses import dataclass, field
from typing import Any


from proxai.http import errors as E


@dataclass(frozen=True)
class StateSpec:
    protocol: str
    previous: str
    store: str
    input: str
    output: str
    object: str
    text_input: dict
    content_input: dict | None = None
    content_types: frozenset = frozenset()
    item_ids: dict = field(default_factory=dict)
    id_pattern: re.Pattern | None = None
    not_found_code: str | None = None
    not_found_type: str | None = None  # the error type of an unknown resource, in the protocol's vocabulary
    vocabulary: str | None = None
    stored_statuses: frozenset = frozenset({"completed"})
    echo: tuple = ()
    paths: dict = field(default_factory=dict)
    snapshot_field: str = "response"
    snapshot_events: frozenset = frozenset()  # bytes
    terminal_events: frozenset = frozenset()  # bytes
    id_field: str | None = None  # the field of non-snapshot events naming the resource
    event_id: str | None = None  # the field of each event's resumable id
    steps: dict = field(default_factory=dict)
    replay: dict = field(default_factory=dict)
    background: dict = field(default_factory=dict)
    include_input: str | None = None

    @property
    def noun(self) -> str:
        return self.object.replace("_", " ")

    def not_found_previous(self, resource_id: str) -> E.InvalidRequest:
        return E.InvalidRequest(f"Previous {self.noun} with id '{resource_id}' not found.", param=self.previous,
                                code=self.not_found_code)

    def not_found(self, resource_id: str) -> E.NotFound:
        return E.NotFound(f"{self.noun.capitalize()} with id '{resource_id}' not found.",
                          error_type=self.not_found_type, type_family=self.vocabulary if self.not_found_type else None)

    def input_items(self, value: Any) -> list:
        """The request's input as stored items: a string becomes `text_input`, a list of only
        content parts one `content_input`; with `item_ids`, every item an id (input_items
        lists them by id) and the easy message form spelled out. The decoder validates the
        items themselves later, so odd shapes are kept as sent."""
        if value is None:
            return []
        if isinstance(value, str):
            value = [_fill(self.text_input, "$text", value)]
        if not isinstance(value, list):
            return []
        if (self.content_input is not None and value and
                all(isinstance(part, dict) and part.get("type") in self.content_types for part in value)):
            value = [_fill(self.content_input, "$content", copy.deepcopy(value))]
        if not self.item_ids:
            return copy.deepcopy(value)
        items = []
        for item in value:
            if not isinstance(item, dict):
                items.append(item)
                continue
            item = copy.deepcopy(item)
            kind = item.get("type")
            if kind is None and "role" in item:
                item["type"] = kind = "message"
            if kind == "message" and isinstance(item.get("content"), str):
                part = "output_text" if item.get("role") == "assistant" else "input_text"
                item["content"] = [{"type": part, "text": item["content"]}]
                if part == "output_text":
                    item["content"][0]["annotations"] = []
            if not item.get("id"):
                item["id"] = self.item_ids.get(kind, "item_") + uuid.uuid4().hex
            if kind in ("message", "function_call_output", "custom_tool_call_output") and "status" not in item:
                item["status"] = "completed"
            items.append(item)
        return items


NONE = StateSpec(protocol="", previous="", store="", input="", output="", object="", text_input={})  # no state section


def _fill(template: Any, name: str, value: Any) -> Any:
    if template == name:
        return value
    if isinstance(template, dict):
        return {key: _fill(item, name, value) for key, item in template.items()}
    if isinstance(template, list):
        return [_fill(item, name, value) for item in template]
    return template


def _plain(value: Any) -> Any:
    """A descriptor value as plain dicts and lists (the YAML loader's are located subclasses)."""
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item) for item in value]
    return value


def of(wire, protocol: str | None) -> StateSpec | None:
    """The protocol's StateSpec, or None when it has no `state:` section."""
    section = wire.state(protocol)
    if not section:
        return None
    return _spec(protocol, _plain(section), wire.descriptors[protocol].error_vocabulary)


@functools.cache
def builtin(protocol: str) -> StateSpec | None:
    """The built-in rules' StateSpec of a protocol, for code that serves only it and has no
    engine at hand (a Responses conversation's items)."""
    from engine.ruleset import BUILTIN_RULES, read_file

    src, _ = read_file(BUILTIN_RULES / protocol / "protocol.yaml")
    doc = src.doc if src is not None else {}
    section = doc.get("state")
    return _spec(protocol, _plain(section), (doc.get("errors") or {}).get("vocabulary")) if section else None


def _spec(protocol: str, section: dict, vocabulary: str | None) -> StateSpec:
    stream = section.get("stream") or {}
    pattern = section.get("id_pattern")
    return StateSpec(
        protocol=protocol, previous=section["previous"], store=section["store"], input=section["input"],
        output=section["output"], object=section["object"], text_input=section["text_input"],
        content_input=section.get("content_input"), content_types=frozenset(section.get("content_types") or ()),
        item_ids=section.get("item_ids") or {}, id_pattern=re.compile(pattern) if pattern else None,
        not_found_code=section.get("not_found_code"), not_found_type=section.get("not_found_type"),
        vocabulary=vocabulary,
        stored_statuses=frozenset(section.get("stored_statuses") or ("completed",)),
        echo=tuple(section.get("echo") or ()), paths=section.get("paths") or {},
        snapshot_field=stream.get("snapshot_field", "response"),
        snapshot_events=frozenset(name.encode() for name in stream.get("snapshot") or ()),
        terminal_events=frozenset(name.encode() for name in stream.get("terminal") or ()),
        id_field=stream.get("id_field"), event_id=stream.get("event_id"), steps=stream.get("steps") or {},
        replay=section.get("replay") or {}, background=section.get("background") or {},
        include_input=section.get("include_input"),
    )
