"""Gemini Interactions hooks of the response and stream codecs (names gemini_interactions.<name>).

A stream's step book is a plain dict in the codec's ``$state`` (``steps: {open: {}, next: 0}``),
passed in as ``book``: an Interactions step is indexed 0, 1, 2... in start order, whatever
the IR block indexes were, and a thought step's summary text and opaque state make its
signature when it stops."""
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


def stamp(scope):
    """Every client event's resumable `event_id`: evt_1, evt_2... over the stream."""
    state = scope.vars["state"]
    state["events"] = state.get("events", 0) + 1
    event = scope.cur
    event["event_id"] = f"evt_{state['events']}"
    return event


def signature(scope, part=None):
    """A reasoning part's opaque state as a thought step's `signature`: the continuation
    envelope (docs/continuation.md), its ASCII in standard base64 as the field is bytes.
    None when there is nothing to carry (continuation off, no opaque state)."""
    envelope = continuation.envelope(scope.ctx, part)
    return base64.b64encode(envelope.encode()).decode() if envelope else None


def open_step(scope, book=None, index=None, kind=None):
    """A step for IR block `index` (or a provider step): ``{index, kind}``, numbered in start order."""
    entry = {"index": book["next"], "kind": kind, "chunks": [], "opaque": None, "streamed": False}
    book["next"] += 1
    book["open"][str(index)] = entry
    return entry


def skip_step(scope, book=None, index=None):
    """An IR block with no Interactions step (a server tool the proxy ran): its events go nowhere."""
    book["open"][str(index)] = {"index": None, "kind": "skipped"}


def _entry(book, index, event):
    entry = book["open"].get(str(index))
    if entry is None:
        raise UpstreamProtocolError(f"{event} for step {index} that is not open")
    return entry


def step_delta(scope, book=None, index=None, delta=None):
    """The open step a delta belongs to; a thought's text is kept for its envelope."""
    entry = _entry(book, index, "a delta")
    if delta and entry["kind"] != "skipped":
        entry["streamed"] = True
        if entry["kind"] == "reasoning":
            entry["chunks"].append(delta)
    return entry


def step_opaque(scope, book=None, index=None, opaque=None):
    _entry(book, index, "opaque state")["opaque"] = opaque


def close_step(scope, book=None, index=None):
    """The closed step, a thought's summary text joined (``text``)."""
    entry = book["open"].pop(str(index), None)
    if entry is None:
        raise UpstreamProtocolError(f"step.stop for step {index} that is not open")
    entry["text"] = "".join(entry.pop("chunks", ()))
    return entry


def merge_outputs(scope, steps=None):
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


HOOKS = {
    "gemini_interactions.iso_time": iso_time,
    "gemini_interactions.interaction_id": interaction_id,
    "gemini_interactions.stamp": stamp,
    "gemini_interactions.signature": signature,
    "gemini_interactions.open_step": open_step,
    "gemini_interactions.skip_step": skip_step,
    "gemini_interactions.step_delta": step_delta,
    "gemini_interactions.step_opaque": step_opaque,
    "gemini_interactions.close_step": close_step,
    "gemini_interactions.merge_outputs": merge_outputs,
    "gemini_interactions.summary_text": summary_text,
}
