"""Gemini generateContent hooks: the steps its rules cannot say as data.

Provider side (requests to Gemini, its responses and streams): linking function
responses to their calls by name, moving a thought signature back onto the part
it stood beside, merging same-role contents, minting call ids Gemini left out,
and the per-stream block state of a chunk stream that has no indexes.
"""
from __future__ import annotations

import mimetypes
import re
import uuid

from ..errors import InvalidRequest, UpstreamProtocolError

# --- provider side -------------------------------------------------------------------

# Ids the proxy mints for calls Gemini sent without one. They are never sent back to
# Gemini (which links such calls by name and order), so they must be recognisable.
MINTED = "gcall_"
# Google's documented value for a function call Gemini did not produce (history from
# another model): it tells Gemini 3 to skip signature validation for that call. It is
# not a signature and carries no reasoning; a real one always wins.
UNSIGNED_CALL = "skip_thought_signature_validator"
_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")


def call_id(scope, id=None):
    """A call id as Gemini may see it: its own ids go back, minted ones are left out."""
    if not isinstance(id, str) or not id or id.startswith(MINTED):
        return None
    return id


def standard_base64(scope, data=None):
    """Base64 in the standard alphabet, padded: clients may send the URL-safe one."""
    if not isinstance(data, str):
        return data
    text = data.strip().replace("-", "+").replace("_", "/")
    return text + "=" * (-len(text) % 4)


def guess_mime(scope, url=None):
    if not isinstance(url, str):
        return None
    return mimetypes.guess_type(url.split("?", 1)[0])[0]


def link_results(scope):
    """Each IR tool_result gets `name`: the function it answers, found by call id in
    the history (a functionResponse needs the name; the id alone is not enough)."""
    ir = scope.cur
    if not isinstance(ir, dict):
        return ir
    names: dict = {}
    for message in ir.get("messages") or ():
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        for part in message.get("content") or ():
            if isinstance(part, dict) and part.get("type") == "tool_call" and isinstance(part.get("id"), str):
                names[part["id"]] = part.get("name")
    out = []
    for message in ir.get("messages") or ():
        if isinstance(message, dict) and message.get("role") == "tool":
            parts = []
            for part in message.get("content") or ():
                if isinstance(part, dict) and part.get("type") == "tool_result":
                    name = names.get(part.get("call_id"))
                    if not isinstance(name, str):
                        raise InvalidRequest("a tool result whose call is not in the history cannot be linked for "
                                             "Gemini generateContent (it needs the function name)",
                                             part.get("_path") or message.get("_path") or "call_id")
                    part = {**part, "name": name}
                parts.append(part)
            message = {**message, "content": parts}
        out.append(message)
    return {**ir, "messages": out}


def attach_signatures(scope):
    """Model contents: a signature marker ({thoughtSignature} alone) goes onto the part
    after it, where Gemini had it; at the end of a turn it is an empty text part, as
    Gemini streams it. A turn's first function call with no signature gets Google's
    skip value (history from another model or from a client that dropped it)."""
    body = scope.cur
    for content in body.get("contents") or ():
        if content.get("role") != "model":
            continue
        parts, pending = [], None
        for part in content.get("parts") or ():
            if set(part) == {"thoughtSignature"}:
                if pending is not None:
                    parts.append({"text": "", "thoughtSignature": pending})
                pending = part["thoughtSignature"]
                continue
            if pending is not None:
                part = {**part, "thoughtSignature": pending} if "thoughtSignature" not in part else part
                pending = None
            parts.append(part)
        if pending is not None:
            parts.append({"text": "", "thoughtSignature": pending})
        calls = [p for p in parts if "functionCall" in p]
        if calls and "thoughtSignature" not in calls[0]:
            calls[0]["thoughtSignature"] = UNSIGNED_CALL
            scope.ctx.trace("function call without a Gemini thought signature sent with the skip-validation value")
        content["parts"] = parts
    return body


def merge_contents(scope):
    """Consecutive same-role contents become one (a turn's function responses must be
    one content); contents left with no parts are dropped (Gemini rejects them)."""
    body = scope.cur
    merged: list = []
    for content in body.get("contents") or ():
        if not content.get("parts"):
            continue
        if merged and merged[-1]["role"] == content["role"]:
            merged[-1] = {**merged[-1], "parts": merged[-1]["parts"] + content["parts"]}
        else:
            merged.append(content)
    body["contents"] = merged
    return body


def _mint_base(response_id) -> str:
    base = _ID_CHARS.sub("", response_id)[:20] if isinstance(response_id, str) else ""
    return base or uuid.uuid4().hex[:20]


def number_calls(scope):
    """Response: every functionCall without an id gets a minted one, stable for the
    response (responseId and position), before the rules read it."""
    body = scope.cur
    candidates = body.get("candidates") if isinstance(body, dict) else None
    if not isinstance(candidates, list) or not candidates or not isinstance(candidates[0], dict):
        return body
    content = candidates[0].get("content")
    if not isinstance(content, dict) or not isinstance(content.get("parts"), list):
        return body
    base, n, parts = None, 0, []
    for part in content["parts"]:
        call = part.get("functionCall") if isinstance(part, dict) else None
        if isinstance(call, dict):
            if not call.get("id"):
                base = base or _mint_base(body.get("responseId"))
                part = {**part, "functionCall": {**call, "id": f"{MINTED}{base}_{n}"}}
            n += 1
        parts.append(part)
    first = {**candidates[0], "content": {**content, "parts": parts}}
    return {**body, "candidates": [first, *candidates[1:]]}


# --- provider streams ------------------------------------------------------------------
# Each chunk is a whole GenerateContentResponse with no event type and no indexes:
# split cuts it into typed sub-events; the state tracks the one open text or thought
# block (IR indexes count up from 0) and mints call ids.


class Chunks:
    """``split``: one Gemini stream chunk (a whole GenerateContentResponse, no type, no
    index) -> typed sub-events: start, thought, signature, text, function_call,
    unsupported, finish, blocked, error. A call without an id gets one minted from the
    responseId and its position, as in a whole response (number_calls); finish and
    blocked carry the usage so far (usageMetadata is cumulative: the last one counts)."""

    __slots__ = ("started", "response_id", "id_base", "calls", "usage")

    def __init__(self, ctx):
        self.started = False
        self.response_id = self.id_base = self.usage = None
        self.calls = 0

    def split(self, chunk) -> list:
        out: list = []
        if isinstance(chunk.get("error"), dict):
            return [{"type": "error", "error": chunk["error"]}]
        if not self.started:
            self.started = True
            self.response_id = chunk.get("responseId")
            out.append({"type": "start", "id": self.response_id, "model": chunk.get("modelVersion")})
        if isinstance(chunk.get("usageMetadata"), dict):
            self.usage = chunk["usageMetadata"]
        candidates = chunk.get("candidates")
        candidate = candidates[0] if isinstance(candidates, list) and candidates else None
        if candidate is None:
            feedback = chunk.get("promptFeedback")
            if isinstance(feedback, dict) and feedback.get("blockReason"):
                out.append({"type": "blocked", **feedback, "usage": self.usage})
            return out
        if not isinstance(candidate, dict):
            raise UpstreamProtocolError("malformed Gemini stream chunk (a candidate is not an object)")
        content = candidate.get("content") or {}
        for part in content.get("parts") or ():
            if not isinstance(part, dict):
                raise UpstreamProtocolError("malformed Gemini stream chunk (a part is not an object)")
            signature = part.get("thoughtSignature")
            if part.get("thought"):
                out.append({"type": "thought", "text": part.get("text") or "", "signature": signature})
                continue
            if signature:
                out.append({"type": "signature", "signature": signature})
            if "text" in part:
                out.append({"type": "text", "text": part["text"]})
            elif isinstance(part.get("functionCall"), dict):
                out.append({"type": "function_call", **part["functionCall"], "id": self._call_id(part["functionCall"].get("id"))})
            else:
                out.append({"type": "unsupported", "keys": sorted(k for k in part if k != "thoughtSignature")})
        if candidate.get("finishReason"):
            out.append({"type": "finish", "finishReason": candidate["finishReason"],
                        "finishMessage": candidate.get("finishMessage"), "has_calls": bool(self.calls),
                        "usage": self.usage})
        return out

    def _call_id(self, id) -> str:
        position, self.calls = self.calls, self.calls + 1
        if isinstance(id, str) and id:
            return id
        if self.id_base is None:
            self.id_base = _mint_base(self.response_id)
        return f"{MINTED}{self.id_base}_{position}"


class Blocks:
    """The IR blocks of a Gemini stream: text and thought parts continue the open block
    across chunks; a call or a signature is a block of its own."""

    __slots__ = ("open", "next")

    def __init__(self, ctx):
        self.open = None  # {kind, index} of the open block
        self.next = 0

    def start(self, kind=None, id=None, name=None, opaque=None) -> list:
        """IR events that leave a block of `kind` open: nothing if one already is (text,
        reasoning), else the open block's stop and a new start."""
        if self.open is not None and self.open["kind"] == kind and kind in ("text", "reasoning"):
            return []
        out = self.stop()
        index, self.next = self.next, self.next + 1
        self.open = {"kind": kind, "index": index}
        begin = {"type": "block_start", "index": index, "kind": kind}
        if kind == "tool_call":
            begin.update(id=id, name=name)
        if opaque is not None:
            begin["opaque"] = opaque
        return out + [begin]

    def index(self):
        return self.open["index"] if self.open is not None else None

    def stop(self) -> list:
        current, self.open = self.open, None
        return [{"type": "block_stop", "index": current["index"]}] if current is not None else []


OBJECTS = {"gemini.chunks": Chunks, "gemini.blocks": Blocks}


_DELAY = re.compile(r"^(\d+(?:\.\d+)?)s$")


def retry_after(scope, details=None):
    """Google's RetryInfo detail (`retryDelay: "37s"`) as a Retry-After value in whole
    seconds (at least 1): what every client SDK reads before retrying a 429."""
    import math

    for detail in details if isinstance(details, list) else ():
        if isinstance(detail, dict) and str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            match = _DELAY.match(str(detail.get("retryDelay", "")))
            if match:
                return str(max(1, math.ceil(float(match.group(1)))))
    return None


HOOKS = {
    # provider side
    "gemini.retry_after": retry_after,
    "gemini.call_id": call_id,
    "gemini.standard_base64": standard_base64,
    "gemini.guess_mime": guess_mime,
    "gemini.link_results": link_results,
    "gemini.attach_signatures": attach_signatures,
    "gemini.merge_contents": merge_contents,
    "gemini.number_calls": number_calls,
}
