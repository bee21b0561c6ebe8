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


class StepsOut:
    """Encoding: our step per IR block, numbered in start order; a thought's summary text
    and opaque state for its signature; every event's resumable `event_id` (stamp)."""

    __slots__ = ("steps", "next_index", "events")

    def __init__(self, ctx):
        self.steps: dict = {}
        self.next_index = 0
        self.events = 0

    def open(self, index=None, kind=None, text=None, opaque=None) -> dict:
        step = {"index": self.next_index, "kind": kind, "chunks": [text] if text and kind == "reasoning" else [],
                "opaque": opaque}
        self.next_index += 1
        self.steps[index] = step
        return step

    def skip(self, index=None) -> None:
        """An IR block with no Interactions step (a server tool the proxy ran): its events go nowhere."""
        self.steps[index] = {"index": None, "kind": "skipped"}

    def _step(self, index) -> dict:
        step = self.steps.get(index)
        if step is None:
            raise UpstreamProtocolError(f"IR event for block {index} before its block_start")
        return step

    def delta(self, index=None, delta=None) -> dict:
        step = self._step(index)
        if step["kind"] == "reasoning" and delta:
            step["chunks"].append(delta)  # joined into "text" at the close
        return step

    def opaque(self, index=None, opaque=None) -> None:
        self._step(index)["opaque"] = opaque

    def close(self, index=None) -> dict:
        """The closed step (a thought's text and opaque state make its signature)."""
        step = self.steps.pop(index, None)
        if step is None:
            raise UpstreamProtocolError(f"block_stop for block {index} that is not open")
        step["text"] = "".join(step.pop("chunks", ()))
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
