"""Gemini Interactions hooks of the response and stream codecs (names gemini_interactions.<name>),
and the streams' state objects (``OBJECTS``): the steps of a provider's stream (:class:`StepsIn`)
and of a client's (:class:`StepsOut`: steps numbered 0, 1, 2... in start order whatever the IR
block indexes, a thought's summary and opaque state for its signature, resumable event ids)."""
from __future__ import annotations

import base64
import time
import uuid

from engine.errors import UpstreamProtocolError
from engine.hooks import continuation
from engine.hooks.open_blocks import OpenBlocks


def iso_time(scope, value=None):
    """Unix seconds (or now) -> the resource's `created` / `updated`: YYYY-MM-DDThh:mm:ssZ."""
    seconds = value if isinstance(value, (int, float)) and not isinstance(value, bool) else time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def interaction_id(scope, value=None):
    """The id an Interactions client gets: ``int_<upstream id>`` (docs/mappings.md §14), or a
    fresh one when the provider's answer had none (the SDK requires it)."""
    return f"int_{value}" if value else f"int_{uuid.uuid4().hex}"


def signature(scope, part=None):
    """A reasoning part's opaque state as a thought step's `signature`: the continuation
    envelope (docs/continuation.md), its ASCII in standard base64 as the field is bytes.
    None when there is nothing to carry (continuation off, no opaque state)."""
    envelope = continuation.envelope(scope.ctx, part)
    return base64.b64encode(envelope.encode()).decode() if envelope else None


def output_steps(scope, steps=None):
    """One model_output step for each run of answer content (text and images side by side),
    as the service writes them; thought and function_call steps stand alone."""
    out = []
    for step in steps or ():
        if not step:
            continue
        if step.get("type") == "model_output" and out and out[-1].get("type") == "model_output":
            out[-1] = {**out[-1], "content": [*out[-1]["content"], *step["content"]]}
        else:
            out.append(step)
    return out


def summary_text(scope, summary=None):
    """A thought step's summary texts joined (None when it has none); image summaries have no IR slot."""
    texts = [c["text"] for c in summary or () if isinstance(c, dict) and c.get("type") == "text"
             and isinstance(c.get("text"), str)]
    return "".join(texts) if texts else None


class StepsIn:
    """Decoding: the open steps of a provider's stream by index (their index is the IR
    block's), whether a call's arguments streamed, whether the answer called a function."""

    __slots__ = ("open", "called")

    def __init__(self, ctx):
        self.open: dict = {}
        self.called = False

    def start(self, index=None, kind=None, arguments=None) -> None:
        if index in self.open:
            raise UpstreamProtocolError(f"step.start for step {index} that is already open")
        self.open[index] = {"kind": kind, "streamed": bool(arguments)}
        if kind == "tool_call":
            self.called = True

    def delta(self, index=None, arguments=None) -> None:
        if index not in self.open:
            raise UpstreamProtocolError(f"step.delta for step {index} that is not open")
        if arguments:
            self.open[index]["streamed"] = True

    def stop(self, index=None) -> dict:
        """The stopped step: its kind and whether a call's arguments streamed."""
        step = self.open.pop(index, None)
        if step is None:
            raise UpstreamProtocolError(f"step.stop for step {index} that is not open")
        return step

    def has_calls(self) -> bool:
        return self.called


class StepsOut(OpenBlocks):
    """Encoding: our step per IR block (engine/hooks/open_blocks.py), a thought's summary,
    from its opening text on, in its signature; every event's resumable `event_id` (stamp)."""

    __slots__ = ("events",)

    def __init__(self, ctx):
        super().__init__(ctx)
        self.events = 0

    def open(self, index=None, kind=None, text=None, opaque=None) -> dict:
        step = super().open(index, kind, opaque=opaque)
        if text and kind == "reasoning":
            step["chunks"] = [text]
        return step

    def stamp(self, event: dict) -> dict:
        """Every client event's `event_id`: evt_1, evt_2... over the stream (GET resumes after one)."""
        self.events += 1
        event["event_id"] = f"evt_{self.events}"
        return event


HOOKS = {
    "gemini_interactions.iso_time": iso_time,
    "gemini_interactions.interaction_id": interaction_id,
    "gemini_interactions.signature": signature,
    "gemini_interactions.output_steps": output_steps,
    "gemini_interactions.summary_text": summary_text,
}

OBJECTS = {
    "gemini_interactions.steps_in": StepsIn,
    "gemini_interactions.steps_out": StepsOut,
}
