"""Prompt caching across protocols.

Anthropic caches a prompt prefix only where the request marks it (``cache_control``
breakpoints, at most four); OpenAI caches by itself and takes ``prompt_cache_key``
(routing affinity) and ``prompt_cache_retention``. Three steps bridge them:

- ``caching.client_hints`` (after the Chat and Responses request decoders): the
  client's explicit hints -- a content part's or tool's ``cache_control`` (the
  extension OpenRouter and LiteLLM accept), OpenAI's ``prompt_cache_breakpoint`` --
  become IR ``cache: {ttl}`` marks on the parts they name; the encoders' templates
  carry them to the provider's blocks.
- ``caching.anthropic_breakpoints`` (after the Anthropic request encoder): the
  provider's ``prompt_caching`` policy. ``auto`` places breakpoints when the client
  sent none; ``passthrough`` keeps only the client's; ``off`` sends none. Every
  policy keeps the request within Anthropic's rules (at most four, never on an
  empty or thinking block, longer TTLs first).
- ``caching.prompt_cache_key`` (in the Anthropic request decoder): toward OpenAI
  providers, a stable key derived from the conversation, an HMAC so the raw
  session id or prompt never leaves the proxy in it.
"""
from __future__ import annotations

import fnmatch
import functools
import hashlib
import hmac
import re

import orjson

SHORT, LONG = "5m", "1h"
_MODEL_TABLE = "anthropic_messages.model->cache_min_prefix_tokens"
_SETTINGS = "prompt_caching.setting->value"
_DEFAULTS = {"max_breakpoints": 4, "chars_per_token": 3.5, "tokens_per_image": 1500}

# --- client hints -> IR ------------------------------------------------------------

_PATH_STEP = re.compile(r"([A-Za-z_]\w*)|\[(\d+)\]")


def _resolve(root, path):
    """The wire value at a decoder ``_path`` (``messages[2].content[1]``); None if absent."""
    if not isinstance(path, str):
        return None
    node = root
    for name, index in _PATH_STEP.findall(path):
        if name:
            node = node.get(name) if isinstance(node, dict) else None
        else:
            node = node[int(index)] if isinstance(node, list) and int(index) < len(node) else None
        if node is None:
            return None
    return node


def _hint(wire) -> dict | None:
    """A wire item's cache hint as an IR mark. OpenAI's ``prompt_cache_breakpoint``
    (TTL 30m, a minimum) becomes Anthropic's default 5m, refreshed on every hit:
    the 1h tier bills writes at twice the base price, so it is used only when the
    client asks for 1h or for extended retention."""
    if not isinstance(wire, dict):
        return None
    cc = wire.get("cache_control")
    if isinstance(cc, dict):
        return {"ttl": LONG if cc.get("ttl") == LONG else SHORT}
    if isinstance(wire.get("prompt_cache_breakpoint"), dict):
        return {"ttl": SHORT}
    return None


def client_hints(scope):
    """Chat / Responses request decode: explicit cache hints onto the IR items they mark."""
    ir, wire = scope.cur, scope.vars.get("root")
    if not isinstance(ir, dict) or not isinstance(wire, dict) or not _may_hint(wire):
        return ir
    for tool in ir.get("tools") or ():
        mark = _hint(_resolve(wire, tool.get("_path")))
        if mark:
            tool["cache"] = mark
    for msg in ir.get("messages") or ():
        parts = [p for p in msg.get("content") or () if isinstance(p, dict)]
        path = msg.get("_path")
        wire_msg = _resolve(wire, path)
        used = set()
        for part in parts:
            own = part.get("_path")
            if own and own != path:
                used.add(own)
                mark = _hint(_resolve(wire, own))
                if mark:
                    part["cache"] = mark
        # Hints the parts did not take (string content, a tool message's parts, a
        # message-level cache_control) mark the end of the message: its last part.
        pending = _hint(wire_msg)
        content = wire_msg.get("content") if isinstance(wire_msg, dict) else None
        for j, item in enumerate(content if isinstance(content, list) else ()):
            if f"{path}.content[{j}]" not in used:
                pending = _merge_marks(pending, _hint(item))
        if pending and parts:
            parts[-1]["cache"] = _merge_marks(parts[-1].get("cache"), pending)
    return ir


def _may_hint(wire: dict) -> bool:
    """False when no hint key is anywhere in the body: most requests carry none, and one
    serialisation is far cheaper than resolving every item's path (a key's name in the
    text of a prompt only makes the full pass run)."""
    try:
        raw = orjson.dumps(wire)
    except (orjson.JSONEncodeError, TypeError):
        return True
    return b'"cache_control"' in raw or b'"prompt_cache_breakpoint"' in raw


def _merge_marks(a, b):
    if not a or not b:
        return a or b
    return {"ttl": LONG if LONG in (a.get("ttl"), b.get("ttl")) else SHORT}


# --- Anthropic provider requests: the placement pass ---------------------------------


class _Slot:
    """One block of the provider request in cache-prefix order (tools, system, messages)."""

    __slots__ = ("path", "obj", "tokens", "ok", "role")

    def __init__(self, path, obj, tokens, ok, role=None):
        self.path, self.obj, self.tokens, self.ok, self.role = path, obj, tokens, ok, role


def _setting(tables, name):
    table = (tables or {}).get(_SETTINGS)
    value = table.lookup(name) if table is not None else None
    return _DEFAULTS[name] if value is None or not isinstance(value, (int, float)) else value


def min_prefix_tokens(tables, model) -> int:
    """The minimum cacheable prefix of an upstream model: the first glob of the table
    that matches, else the table's default."""
    table = (tables or {}).get(_MODEL_TABLE)
    if table is None:
        return 1024
    return _min_prefix(table, (model or "").lower())


@functools.lru_cache(maxsize=256)
def _min_prefix(table, name: str) -> int:
    # tables are immutable once loaded, and a proxy sees few model names
    for pattern, tokens in table.map.items():
        if fnmatch.fnmatchcase(name, pattern.lower()):
            return int(tokens)
    return int(table.default) if isinstance(table.default, (int, float)) else 1024


def _chars(block) -> int:
    if isinstance(block, str):
        return len(block)
    if not isinstance(block, dict):
        return len(orjson.dumps(block))
    kind = block.get("type")
    if kind == "text":
        return len(block.get("text") or "")
    if kind == "thinking":
        return len(block.get("thinking") or "") + len(block.get("signature") or "")
    if kind == "tool_use":
        return len(block.get("name") or "") + len(orjson.dumps(block.get("input")))
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, str):
            return len(content)
        return sum(_chars(b) for b in content or ())
    return len(orjson.dumps(block))


def _estimate(block, cpt, per_image) -> int:
    kind = block.get("type") if isinstance(block, dict) else None
    if kind in ("image", "document"):
        return per_image
    images = 0
    if kind == "tool_result" and isinstance(block.get("content"), list):
        images = sum(per_image for b in block["content"] if isinstance(b, dict) and b.get("type") in ("image", "document"))
    return int(_chars(block) / cpt) + images


def _cacheable(block) -> bool:
    """Anthropic refuses cache_control on empty text blocks and on thinking blocks."""
    if not isinstance(block, dict):
        return False
    kind = block.get("type")
    if kind in ("thinking", "redacted_thinking"):
        return False
    if kind == "text":
        return bool(block.get("text"))
    return True


def _slots(body, cpt, per_image, measure) -> list[_Slot]:
    """The request's blocks; their length estimates only when ``measure`` (auto placement)."""
    slots = []
    for i, tool in enumerate(body.get("tools") or ()):
        if isinstance(tool, dict):
            slots.append(_Slot(f"tools[{i}]", tool, int(len(orjson.dumps(tool)) / cpt) if measure else 0, True))
    system = body.get("system")
    if isinstance(system, str):
        slots.append(_Slot("system", None, int(len(system) / cpt), bool(system)))
    elif isinstance(system, list):
        for i, block in enumerate(system):
            slots.append(_Slot(f"system[{i}]", block, _estimate(block, cpt, per_image) if measure else 0, _cacheable(block)))
    for i, msg in enumerate(body.get("messages") or ()):
        content = msg.get("content") if isinstance(msg, dict) else None
        for j, block in enumerate(content if isinstance(content, list) else ()):
            slots.append(_Slot(f"messages[{i}].content[{j}]", block, _estimate(block, cpt, per_image) if measure else 0,
                               _cacheable(block), msg.get("role")))
    return slots


def _blocks(body):
    """The objects of _slots, in its order, without their paths and estimates."""
    for tool in body.get("tools") or ():
        yield tool
    system = body.get("system")
    if isinstance(system, list):
        yield from system
    for msg in body.get("messages") or ():
        content = msg.get("content") if isinstance(msg, dict) else None
        if isinstance(content, list):
            yield from content


def _control(ttl) -> dict:
    # The 5m default is sent without `ttl`, the form every Anthropic-compatible server knows.
    return {"type": "ephemeral", "ttl": LONG} if ttl == LONG else {"type": "ephemeral"}


def _ttl(control) -> str:
    return LONG if isinstance(control, dict) and control.get("ttl") == LONG else SHORT


def _mark(body, slot, ttl) -> None:
    if slot.obj is None:  # the string form of system: the block form holds a breakpoint
        body["system"] = [{"type": "text", "text": body["system"], "cache_control": _control(ttl)}]
        slot.obj, slot.path = body["system"][0], "system[0]"
    else:
        slot.obj["cache_control"] = _control(ttl)


def _auto_positions(slots, budget, min_tokens) -> list[int]:
    """Anthropic's layout for multi-turn agents: the end of the tools, the end of the
    system prompt, and a rolling breakpoint on the last user turn (its last
    cacheable block: text or tool result). The previous user turn's end is marked
    too when a slot is left: it is exactly where the last request wrote, so the next
    read hits whatever the number of blocks in between (Anthropic looks back only
    20 blocks from a breakpoint). A position whose prefix is below the model's
    minimum is skipped; it could not be cached."""
    total, cum = 0, []
    for slot in slots:
        total += slot.tokens
        cum.append(total)

    def last(pred):
        for k in range(len(slots) - 1, -1, -1):
            if pred(slots[k]):
                return k
        return None

    tools_end = last(lambda s: s.path.startswith("tools[") and s.ok)
    system_end = last(lambda s: s.path.startswith("system") and s.ok)
    turn_ends = []
    for k, slot in enumerate(slots):
        if slot.role == "user" and slot.ok:
            head = slot.path.split(".content[")[0]
            if turn_ends and slots[turn_ends[-1]].path.split(".content[")[0] == head:
                turn_ends[-1] = k
            else:
                turn_ends.append(k)
    # Over budget, the rolling breakpoints matter most, then the system prompt.
    priority = [k for k in (turn_ends[-1:] + turn_ends[-2:-1] + [system_end, tools_end]) if k is not None]
    chosen: list[int] = []
    for k in priority:
        if k not in chosen and cum[k] >= min_tokens and len(chosen) < budget:
            chosen.append(k)
    return sorted(chosen)


def anthropic_breakpoints(scope, tables=None):
    """Anthropic request encode, last step: apply the provider's prompt_caching policy."""
    body, ctx = scope.cur, scope.ctx
    if not isinstance(body, dict):
        return body
    ir = scope.vars.get("root") if isinstance(scope.vars.get("root"), dict) else {}
    policy = getattr(ctx, "prompt_caching", "off") or "off"
    if policy == "off":  # every client breakpoint dropped: no slots to lay out
        for block in _blocks(body):
            if isinstance(block, dict) and "cache_control" in block:
                del block["cache_control"]
        body.pop("cache_control", None)
        return body
    cpt = float(_setting(tables, "chars_per_token")) or 3.5
    slots = _slots(body, cpt, int(_setting(tables, "tokens_per_image")), measure=False)
    limit = int(_setting(tables, "max_breakpoints"))
    explicit = [s for s in slots if isinstance(s.obj, dict) and "cache_control" in s.obj]
    if policy == "off":
        for slot in explicit:
            del slot.obj["cache_control"]
        body.pop("cache_control", None)
        return body
    note = (lambda m: ctx.trace(m)) if ctx is not None else (lambda m: None)
    for slot in [s for s in explicit if not s.ok]:
        del slot.obj["cache_control"]
        note(f"cache_control on an empty or thinking block at {slot.path} dropped (Anthropic refuses it there)")
    explicit = [s for s in explicit if s.ok]
    extended = ir.get("prompt_cache_retention") == "24h"
    placed: list[tuple[_Slot, str]] = []
    if explicit:
        allowed = limit - (1 if isinstance(body.get("cache_control"), dict) else 0)
        if len(explicit) > allowed:
            # The last ones hold the longest prefixes, and the one the next turn reads.
            for slot in explicit[:len(explicit) - allowed]:
                del slot.obj["cache_control"]
                note(f"cache_control at {slot.path} dropped: Anthropic allows {limit} breakpoints per request")
            explicit = explicit[len(explicit) - allowed:]
        ttls = [LONG if extended else _ttl(s.obj["cache_control"]) for s in explicit]
        # Anthropic requires longer TTLs before shorter ones: a 1h breakpoint after a 5m
        # one lifts the earlier ones to 1h (their prefixes are part of it anyway).
        if LONG in ttls:
            last_long = max(k for k, t in enumerate(ttls) if t == LONG)
            if SHORT in ttls[:last_long]:
                note("cache_control TTLs reordered: a 1h breakpoint after a 5m one lifts the earlier ones to 1h")
            ttls = [LONG if k <= last_long else t for k, t in enumerate(ttls)]
        for slot, ttl in zip(explicit, ttls):
            slot.obj["cache_control"] = _control(ttl)
            placed.append((slot, ttl))
    elif policy == "auto":
        ttl = LONG if extended else SHORT
        min_tokens = min_prefix_tokens(tables, body.get("model"))
        slots = _slots(body, cpt, int(_setting(tables, "tokens_per_image")), measure=True)
        budget = limit - (1 if isinstance(body.get("cache_control"), dict) else 0)
        for k in _auto_positions(slots, budget, min_tokens):
            _mark(body, slots[k], ttl)
            placed.append((slots[k], ttl))
    elif extended and "cache_control" not in body:
        # passthrough: a Responses client's extended retention is its only hint; Anthropic's
        # top-level cache_control marks the last cacheable block, with the long TTL.
        body["cache_control"] = _control(LONG)
    if ctx is not None:
        ctx.cache_breakpoints = [f"{s.path} ttl={t}" for s, t in placed]
        if isinstance(body.get("cache_control"), dict):
            ctx.cache_breakpoints.append(f"cache_control ttl={_ttl(body['cache_control'])}")
    return body


anthropic_breakpoints.reads_tables = True  # type: ignore[attr-defined]


# --- OpenAI provider requests from Anthropic clients: prompt_cache_key ----------------

_LEGACY_SESSION = re.compile(r"_session_([0-9A-Za-z-]{8,})$")


def claude_code_session(user_id) -> str | None:
    """The session id Claude Code puts in ``metadata.user_id``: the legacy
    ``user_<hash>_account_<uuid>_session_<uuid>`` string, or a JSON object text with
    ``session_id``."""
    if not isinstance(user_id, str) or not user_id:
        return None
    if user_id.startswith("{"):
        try:
            doc = orjson.loads(user_id)
        except orjson.JSONDecodeError:
            return None
        sid = doc.get("session_id") if isinstance(doc, dict) else None
        return sid if isinstance(sid, str) and sid else None
    match = _LEGACY_SESSION.search(user_id)
    return match.group(1) if match else None


def derive_key(secret: bytes | None, material: bytes) -> str:
    digest = hmac.new(secret or b"proxai prompt_cache_key", material, hashlib.sha256).hexdigest()
    return "pck_" + digest[:32]


# Claude Code's first system block: a hash that changes every request, for Anthropic's
# billing only (the request decoder leaves it out too).
BILLING_LINE = "x-anthropic-billing-header:"


def _stable_system(system):
    """The system prompt without the billing line: one agent configuration, one key."""
    if not isinstance(system, list):
        return system
    return [b for b in system if not (isinstance(b, dict) and b.get("type") == "text"
                                      and str(b.get("text") or "").startswith(BILLING_LINE))]


def prompt_cache_key(scope):
    """Anthropic request decode: the IR prompt_cache_key toward OpenAI providers.

    The client's override (the ``x-proxai-prompt-cache-key`` header) wins; under
    ``auto`` a key is derived from Claude Code's session id when ``metadata.user_id``
    carries one (one conversation, one key), else from the system prompt and the
    tools (one agent configuration, one key), in both cases with the client's key (one
    tenant's key never serves another). Either way it is an HMAC (under the
    deployment's secret when one is configured), so neither the session id nor the
    prompt can be read off it."""
    ctx, body = scope.ctx, scope.cur
    policy = getattr(ctx, "prompt_caching", "off")
    if policy == "off" or not isinstance(body, dict):
        return None
    if getattr(ctx, "prompt_cache_key", None):
        ctx.cache_key_source = "the x-proxai-prompt-cache-key header"
        return ctx.prompt_cache_key
    if policy != "auto":
        return None
    metadata = body.get("metadata")
    session = claude_code_session(metadata.get("user_id")) if isinstance(metadata, dict) else None
    if session:
        material, source = b"session\0" + session.encode(), "the Claude Code session id in metadata.user_id"
    elif body.get("system") or body.get("tools"):
        material = b"prefix\0" + orjson.dumps([_stable_system(body.get("system")), body.get("tools")],
                                               option=orjson.OPT_SORT_KEYS)
        source = "the system prompt and tools"
    else:
        return None
    if ctx is not None:
        ctx.cache_key_source = source
    tenant = getattr(ctx, "cache_key_tenant", b"")
    if tenant:  # one tenant's key never matches another's, even for the same prompt
        material = b"tenant\0" + tenant + b"\0" + material
    return derive_key(getattr(ctx, "cache_key_secret", None), material)


HOOKS = {
    "caching.client_hints": client_hints,
    "caching.anthropic_breakpoints": anthropic_breakpoints,
    "caching.prompt_cache_key": prompt_cache_key,
}
