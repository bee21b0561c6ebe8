"""A multi-turn coding-agent session with the shape Codex and Claude Code send, and its
requests in each client protocol.

The shape follows recorded agent traffic: a long system prompt (~26k characters),
a list of 18 tools with long descriptions and JSON schemas (~20k characters), then
a loop in which the model answers with a little prose and one to three tool calls,
the client sends the results back (from a short `ls` to a whole file) and, every
few steps, the user adds an instruction. Request k carries the whole history up to
the k-th model call, as agents send it. The content is generated from a fixed seed,
so every run replays the same session byte for byte.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

TOOLS = [
    "read_file", "write_file", "apply_patch", "run_shell", "search_code", "list_dir", "glob", "grep",
    "web_fetch", "todo_write", "run_tests", "git_diff", "git_status", "git_log", "open_pr", "ask_user",
    "notebook_edit", "task",
]
_WORDS = ("the repository tests module parser config handler request response stream event error token "
          "cache file path line function class value field schema route provider client server model").split()


@dataclass
class Step:
    """One model call: the new input since the last call, then the model's answer."""
    user: str | None = None                      # a new user message, or
    results: list[tuple[str, str]] = field(default_factory=list)  # (call id, output) tool results
    text: str = ""                               # the answer's prose
    calls: list[tuple[str, str, str]] = field(default_factory=list)  # (call id, tool, arguments JSON)


@dataclass
class Session:
    system: str
    tools: list[dict]
    steps: list[Step]


def _prose(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(_WORDS) for _ in range(words)).capitalize() + "."


def build(turns: int = 24, seed: int = 17) -> Session:
    rng = random.Random(seed)
    system = "\n\n".join(
        f"## Section {i}\n" + " ".join(_prose(rng, 14) for _ in range(20)) for i in range(18))
    tools = [{"name": name, "description": f"{name}: " + " ".join(_prose(rng, 12) for _ in range(10)),
              "parameters": {"type": "object", "required": ["target"], "properties": {
                  "target": {"type": "string", "description": _prose(rng, 10)},
                  "options": {"type": "object", "description": _prose(rng, 10), "properties": {
                      "limit": {"type": "integer"}, "recursive": {"type": "boolean"}}}}}}
             for name in TOOLS]
    steps, pending = [], [("user", "Fix the failing tests in the parser module and explain the cause.")]
    for k in range(turns):
        step = Step()
        if pending[0][0] == "user":
            step.user = pending[0][1]
        else:
            step.results = [(cid, out) for _, cid, out in pending]
        step.text = _prose(rng, rng.randint(8, 30))
        if k % 6 == 5:  # the model stops for the user; the user answers
            pending = [("user", _prose(rng, rng.randint(10, 40)))]
        else:
            step.calls = [(f"call_{k}_{j}", rng.choice(TOOLS[:12]), json.dumps({"target": f"src/m{rng.randint(1, 40)}.py"}))
                          for j in range(rng.choice((1, 1, 2, 3)))]
            pending = [("result", cid, "\n".join(_prose(rng, 12) for _ in range(rng.choice((2, 10, 40, 120)))))
                       for cid, _, _ in step.calls]
        steps.append(step)
    return Session(system, tools, steps)


# --- requests per client protocol --------------------------------------------------------------


def chat_request(s: Session, k: int, model: str) -> dict:
    messages: list[dict] = [{"role": "system", "content": s.system}]
    for i, step in enumerate(s.steps[:k + 1]):
        if step.user:
            messages.append({"role": "user", "content": step.user})
        for cid, out in step.results:
            messages.append({"role": "tool", "tool_call_id": cid, "content": out})
        if i < k:
            msg: dict = {"role": "assistant", "content": step.text}
            if step.calls:
                msg["tool_calls"] = [{"id": cid, "type": "function", "function": {"name": name, "arguments": args}}
                                     for cid, name, args in step.calls]
            messages.append(msg)
    return {"model": model, "messages": messages, "max_completion_tokens": 1024,
            "tools": [{"type": "function", "function": t} for t in s.tools]}


def responses_request(s: Session, k: int, model: str) -> dict:
    items: list[dict] = []
    for i, step in enumerate(s.steps[:k + 1]):
        if step.user:
            items.append({"role": "user", "content": [{"type": "input_text", "text": step.user}]})
        for cid, out in step.results:
            items.append({"type": "function_call_output", "call_id": cid, "output": out})
        if i < k:
            items.append({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": step.text}]})
            items += [{"type": "function_call", "call_id": cid, "name": name, "arguments": args} for cid, name, args in step.calls]
    return {"model": model, "instructions": s.system, "input": items, "max_output_tokens": 1024, "store": False,
            "tools": [{"type": "function", **t} for t in s.tools]}


def anthropic_request(s: Session, k: int, model: str) -> dict:
    """Claude Code's layout: breakpoints at the end of the system prompt and on the last
    block of the last two user turns (the one this call writes and the one the
    previous call wrote)."""
    messages: list[dict] = []
    for i, step in enumerate(s.steps[:k + 1]):
        content: list[dict] = [{"type": "tool_result", "tool_use_id": cid, "content": out} for cid, out in step.results]
        if step.user:
            content.append({"type": "text", "text": step.user})
        messages.append({"role": "user", "content": content})
        if i < k:
            messages.append({"role": "assistant", "content": [{"type": "text", "text": step.text}] + [
                {"type": "tool_use", "id": cid, "name": name, "input": json.loads(args)} for cid, name, args in step.calls]})
    for msg in [m for m in messages if m["role"] == "user"][-2:]:
        msg["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return {"model": model, "max_tokens": 1024,
            "system": [{"type": "text", "text": s.system, "cache_control": {"type": "ephemeral"}}],
            "messages": messages,
            "tools": [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]} for t in s.tools]}


REQUESTS = {"openai_chat_completions": chat_request, "openai_responses": responses_request,
            "anthropic_messages": anthropic_request}
