"""The continuation envelope: a provider's opaque reasoning state, carried by the client.

Format: ``pxc1.<base64url(JSON)>`` or, with ``continuation.secret`` set,
``pxc1.<base64url(JSON)>.<base64url(HMAC-SHA256, 16 bytes)>``. Only values with
this prefix are envelopes; anything else is foreign provider state.

The JSON is ``{"p": provider protocol, "n": provider name, "b": [block, ...]}``,
one block per reasoning block, plus (for the Chat carrier, which flattens a turn)
``text`` / ``tool`` placeholders recording where reasoning stood relative to text
and tool calls. Block kinds:

* ``{"k": "thinking", "s": signature, "h": digest, "l": length}`` (Anthropic)
* ``{"k": "redacted", "d": data}`` (Anthropic)
* ``{"k": "reasoning", "e": encrypted_content, "i": item id, "h": digest, "l": length, "sm": [summary lengths] | null}`` (Responses)

Text is not stored: the client replays it, and the digest proves it unchanged
(a signature covers the exact thinking text; a block whose text changed is
dropped rather than sent to fail verification). The exception is ``carry``: for a
client that replays no reasoning text (Gemini CLI), each block also keeps its
text as ``"t"``.
"""
from __future__ import annotations

import base64
import hashlib
import hmac

import orjson

PREFIX = "pxc1."
# Separator between reasoning blocks flattened into one Chat reasoning_content.
BLOCK_SEP = "\n\n"
# The Chat carrier appends the envelope to reasoning_content after this marker.
SUFFIX_SEP = "\n\n"


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def digest(text: str | None) -> str:
    return _b64(hashlib.sha256((text or "").encode()).digest()[:12])


def _mac(secret: str, body: str) -> str:
    return _b64(hmac.new(secret.encode(), body.encode(), hashlib.sha256).digest()[:16])


def pack(ctx, blocks: list) -> str:
    body = _b64(orjson.dumps({"p": ctx.provider_protocol, "n": ctx.provider_name, "b": blocks}))
    if ctx.continuation_secret:
        return f"{PREFIX}{body}.{_mac(ctx.continuation_secret, body)}"
    return PREFIX + body


def unpack(ctx, value) -> dict | None:
    """The envelope's payload, or None for foreign or tampered values (traced)."""
    if not isinstance(value, str) or not value.startswith(PREFIX):
        return None
    body, _, mac = value[len(PREFIX):].partition(".")
    if ctx.continuation_secret:
        if not mac or not hmac.compare_digest(mac, _mac(ctx.continuation_secret, body)):
            ctx.trace("continuation envelope with a bad or missing HMAC skipped")
            return None
    try:
        payload = orjson.loads(_unb64(body))
    except (ValueError, orjson.JSONDecodeError):
        ctx.trace("malformed continuation envelope skipped")
        return None
    if not isinstance(payload, dict) or not isinstance(payload.get("b"), list):
        ctx.trace("malformed continuation envelope skipped")
        return None
    return payload


def _block(part: dict) -> dict | None:
    """An IR reasoning part -> an envelope block (None when it has no opaque state)."""
    opaque = part.get("opaque") or {}
    text = part.get("text")
    if "signature" in opaque:
        return {"k": "thinking", "s": opaque["signature"], "h": digest(text), "l": len(text or "")}
    if "data" in opaque:
        return {"k": "redacted", "d": opaque["data"]}
    if "encrypted_content" in opaque:
        return {"k": "reasoning", "e": opaque["encrypted_content"], "i": opaque.get("id"), "h": digest(text),
                "l": len(text or ""), "sm": opaque.get("summary_lengths")}
    return None


def _opaque(payload: dict, block: dict) -> dict:
    base = {"protocol": payload.get("p"), "provider": payload.get("n")}
    kind = block.get("k")
    if kind == "thinking":
        return {**base, "signature": block.get("s")}
    if kind == "redacted":
        return {**base, "data": block.get("d")}
    return {**base, "encrypted_content": block.get("e"), "id": block.get("i"), "summary_lengths": block.get("sm")}


def carry(ctx, parts) -> str | None:
    """Several reasoning parts' state in one envelope that also keeps their text ("t"), for a
    client that replays only the part the state rides on, not the reasoning text (Gemini CLI).
    None when continuation is off or nothing in `parts` has opaque state."""
    if not ctx.continuation_enabled:
        return None
    blocks = []
    for part in parts or ():
        block = _block(part) if isinstance(part, dict) else None
        if block is not None:
            if part.get("text") is not None:
                block["t"] = part["text"]
            blocks.append(block)
    return pack(ctx, blocks) if blocks else None


def carried(ctx, value) -> list[dict] | None:
    """A `carry` envelope -> its IR reasoning parts in order, text restored. None when the
    value is not ours; a block whose text no longer matches its digest is dropped (traced)."""
    payload = unpack(ctx, value)
    if payload is None:
        if isinstance(value, str) and not value.startswith(PREFIX):
            ctx.trace("foreign reasoning state skipped")
        return None
    out = []
    for block in payload["b"]:
        if not isinstance(block, dict) or block.get("k") not in ("thinking", "redacted", "reasoning"):
            continue
        text = block.get("t")
        if "h" in block and (text is not None and not isinstance(text, str) or block["h"] != digest(text)):
            ctx.trace("reasoning text changed since it was signed; block dropped")
            continue
        out.append({"type": "reasoning", "text": text, "opaque": _opaque(payload, block)})
    return out


# --- hooks -----------------------------------------------------------------------


def envelope(ctx, part) -> str | None:
    """One reasoning part's envelope (Responses encrypted_content, Anthropic signature/data).
    None when continuation is off or there is no opaque state to carry."""
    if not ctx.continuation_enabled or not isinstance(part, dict):
        return None
    block = _block(part)
    return pack(ctx, [block]) if block else None


def wrap(scope, part=None):
    return envelope(scope.ctx, part)


def unwrap(scope, value=None, text=None):
    """Envelope -> IR opaque state, when it is ours and its text is unchanged; else None (traced)."""
    ctx = scope.ctx
    if not isinstance(value, str) or not value:
        return None
    payload = unpack(ctx, value)
    if payload is None:
        if not value.startswith(PREFIX):
            ctx.trace("foreign reasoning state skipped")
        return None
    blocks = [b for b in payload["b"] if isinstance(b, dict) and b.get("k") in ("thinking", "redacted", "reasoning")]
    if len(blocks) != 1:
        ctx.trace("continuation envelope with an unexpected layout skipped")
        return None
    block = blocks[0]
    if "h" in block and text is not None and block["h"] != digest(text):
        ctx.trace("reasoning text changed since it was signed; block dropped")
        return None
    return _opaque(payload, block)


def suffix(scope, parts=None):
    """Chat carrier: the envelope suffix for an assistant turn's IR parts ('' when nothing to carry)."""
    ctx = scope.ctx
    if not ctx.continuation_enabled or not parts:
        return ""
    layout, carried = [], False
    for part in parts:
        kind = part.get("type")
        if kind == "reasoning":
            block = _block(part)
            if block is not None:
                carried = True
                layout.append(block)
            else:
                layout.append({"k": "plain", "l": len(part.get("text") or "")})
        elif kind == "text":
            if not layout or layout[-1].get("k") != "text":
                layout.append({"k": "text"})
        elif kind == "tool_call":
            layout.append({"k": "tool", "id": part.get("id")})
    return SUFFIX_SEP + pack(ctx, layout) if carried else ""


def reasoning_text(scope, parts=None):
    """Chat carrier: a turn's visible reasoning, blocks joined with BLOCK_SEP (null if none).
    Redacted blocks have no text and take no place; the envelope keeps their position."""
    texts = [p["text"] for p in parts or () if p.get("type") == "reasoning" and p.get("text") is not None]
    return BLOCK_SEP.join(texts) if texts else None


def split_suffix(scope, text=None):
    """Chat carrier, inbound: ``{text, envelope}`` with the suffix removed from reasoning_content."""
    if not isinstance(text, str):
        return {"text": text, "envelope": None}
    at = text.rfind(PREFIX)
    if at < 0 or any(c not in _ENVELOPE_CHARS for c in text[at + len(PREFIX):]):
        return {"text": text, "envelope": None}
    visible = text[:at]
    if visible.endswith(SUFFIX_SEP):
        visible = visible[: -len(SUFFIX_SEP)]
    return {"text": visible, "envelope": unpack(scope.ctx, text[at:])}


_ENVELOPE_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")


def restore(scope, parts=None, envelope=None, text=None):
    """Chat carrier, inbound: rebuild an assistant turn's IR parts in their original order,
    reasoning blocks with their opaque state. ``parts`` are the turn's text and tool_call
    parts, ``text`` its visible reasoning. Without a usable envelope the reasoning is one
    unsigned part (plain text; encoders skip or pass it per protocol)."""
    parts = list(parts or [])
    if envelope is None:
        return ([{"type": "reasoning", "text": text}] if text else []) + parts
    layout = envelope["b"]
    lengths = [b.get("l", 0) for b in layout if b.get("k") in ("thinking", "plain", "reasoning")]
    pieces, offset, ok = [], 0, True
    for length in lengths:
        pieces.append((text or "")[offset: offset + length])
        offset += length + len(BLOCK_SEP)
    if offset - len(BLOCK_SEP) > len(text or "") and lengths:
        ok = False
    texts = [p for p in parts if p.get("type") == "text"]
    calls = {p.get("id"): p for p in parts if p.get("type") == "tool_call"}
    out, used_text, piece = [], False, iter(pieces)
    for block in layout:
        kind = block.get("k")
        if kind in ("thinking", "plain", "reasoning"):
            visible = next(piece, "")
            if kind == "plain":
                if visible:
                    out.append({"type": "reasoning", "text": visible})
                continue
            if not ok or block.get("h") != digest(visible):
                scope.ctx.trace("reasoning text changed since it was signed; block dropped")
                if visible:
                    out.append({"type": "reasoning", "text": visible})
                continue
            out.append({"type": "reasoning", "text": visible, "opaque": _opaque(envelope, block)})
        elif kind == "redacted":
            out.append({"type": "reasoning", "text": None, "opaque": _opaque(envelope, block)})
        elif kind == "text" and not used_text:
            out.extend(texts)
            used_text = True
        elif kind == "tool":
            call = calls.pop(block.get("id"), None)
            if call is not None:
                out.append(call)
    if not used_text:
        out.extend(texts)
    out.extend(calls.values())
    return out


def usable(scope, opaque=None):
    """Restore opaque state only toward the provider protocol and provider that produced it."""
    if not isinstance(opaque, dict):
        return False
    ctx = scope.ctx
    if opaque.get("protocol") == ctx.provider_protocol and opaque.get("provider") == ctx.provider_name:
        return True
    ctx.trace(f"reasoning state from {opaque.get('protocol')}/{opaque.get('provider')} dropped for {ctx.provider_protocol}/{ctx.provider_name}")
    return False


HOOKS = {
    "continuation.wrap": wrap,
    "continuation.unwrap": unwrap,
    "continuation.suffix": suffix,
    "continuation.reasoning_text": reasoning_text,
    "continuation.split_suffix": split_suffix,
    "continuation.restore": restore,
    "continuation.usable": usable,
}
