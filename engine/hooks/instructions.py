"""System and developer messages after the first turn (docs/mappings.md §1).

Chat and Responses take instructions anywhere in the conversation and keep them in
place. Anthropic takes a ``system`` message in ``messages`` only on the models that
accept one (``mid_conversation_system: native``; by default the model table in
rules/tables/model_features.yaml), and only right after a user turn, before an
assistant turn or at the end. Everywhere else (Gemini, older Claude models) they
fold into the top-level instructions, which moves them before the turns they
followed: a trace says so.
"""
from __future__ import annotations

import fnmatch

INSTRUCTION_ROLES = ("system", "developer")
MODEL_TABLE = "anthropic_messages.model->mid_conversation_system"


def later_instructions(messages) -> list[int]:
    """Indexes of the system/developer messages after the first message of another role
    (the leading ones are the top-level instructions everywhere)."""
    out, started = [], False
    for i, msg in enumerate(messages or ()):
        role = msg.get("role") if isinstance(msg, dict) else None
        if role in INSTRUCTION_ROLES:
            if started:
                out.append(i)
        else:
            started = True
    return out


def model_policy(tables, model) -> str:
    """native or fold for an upstream model: the first glob of the table that matches
    (case-insensitive), else the table's default."""
    table = (tables or {}).get(MODEL_TABLE)
    if table is None:
        return "fold"
    name = (model or "").lower()
    for pattern, value in table.map.items():
        if fnmatch.fnmatchcase(name, pattern.lower()):
            return str(value)
    return str(table.default) if table.default in ("native", "fold") else "fold"


def policy(ctx, tables, model) -> str:
    configured = getattr(ctx, "mid_conversation_system", None)
    return configured if configured in ("native", "fold") else model_policy(tables, model)


def anthropic_in_place(scope, tables=None):
    """Anthropic request encode, on the IR: mark the later instructions ``_in_place`` when
    the model takes them there (the templates then send them as system messages), else
    trace that they fold into ``system``."""
    ir, ctx = scope.cur, scope.ctx
    if not isinstance(ir, dict):
        return ir
    later = later_instructions(ir.get("messages"))
    if not later:
        return ir
    model = getattr(ctx, "upstream_model", None) or ir.get("model")
    if policy(ctx, tables, model) != "native":
        if ctx is not None:
            ctx.trace(f"{_count(later)} after the first turn folded into the top-level system "
                      f"(mid_conversation_system: fold for {model}): they now precede the turns before them")
        return ir
    messages = list(ir["messages"])
    for i in later:
        messages[i] = {**messages[i], "_in_place": True}
    return {**ir, "messages": messages}


anthropic_in_place.reads_tables = True  # type: ignore[attr-defined]


def anthropic_placement(scope):
    """Anthropic request encode, on the provider request (before turns merge): each
    system message goes right after a user turn and before the assistant's. One that
    follows an assistant turn waits for the next user turn (the instruction still comes
    before the answer it was written for); one with no user turn after it folds into
    the top-level system. Either move is traced."""
    body, ctx = scope.cur, scope.ctx
    messages = body.get("messages") if isinstance(body, dict) else None
    if not messages or not any(m.get("role") == "system" for m in messages):
        return body
    out: list = []
    waiting: list = []  # [system message, moved] not placed yet
    moved = 0
    last = None         # the role of the last user/assistant message placed
    for msg in messages:
        role = msg.get("role")
        if role == "system":
            waiting.append([msg, last != "user"])
            continue
        if waiting and role == "assistant" and last == "user":
            out.extend(m for m, _ in waiting)
            moved += sum(1 for _, f in waiting if f)
            waiting = []
        for w in waiting:  # this message passes the waiting ones
            w[1] = True
        out.append(msg)
        last = role
    if waiting and last == "user":
        out.extend(m for m, _ in waiting)
        moved += sum(1 for _, f in waiting if f)
        waiting = []
    body["messages"] = out
    if waiting:
        blocks = [b for m, _ in waiting for b in m.get("content") or ()]
        system = body.get("system")
        head = [{"type": "text", "text": system}] if isinstance(system, str) else list(system or ())
        body["system"] = head + blocks
        if ctx is not None:
            ctx.trace(f"{_count(waiting, 'system message')} with no user turn after it folded into the top-level "
                      "system (Anthropic takes one only after a user turn)")
    if moved and ctx is not None:
        ctx.trace(f"{_count(range(moved), 'system message')} moved after the next user turn "
                  "(Anthropic takes one only after a user turn, before the assistant's)")
    return body


def _count(items, noun="system/developer message") -> str:
    n = len(list(items))
    return f"{n} {noun}{'' if n == 1 else 's'}"


def folded_into(field: str, api: str):
    """A request-encode hook on the IR for a protocol whose instructions go only in `field`:
    later ones fold there (the template does it), traced."""
    def folded(scope):
        ir, ctx = scope.cur, scope.ctx
        if isinstance(ir, dict) and ctx is not None:
            later = later_instructions(ir.get("messages"))
            if later:
                ctx.trace(f"{_count(later)} after the first turn folded into {field} "
                          f"({api} has no instructions in place): they now precede the turns before them")
        return ir

    return folded


gemini_folded = folded_into("systemInstruction", "Gemini")


HOOKS = {
    "instructions.anthropic_in_place": anthropic_in_place,
    "instructions.anthropic_placement": anthropic_placement,
    "instructions.gemini_folded": gemini_folded,
}
