"""Shared by the Interactions end-to-end tests: a config with an Interactions provider and a
Gemini generateContent provider on the mock, the check of what the Interactions mock received,
and the two google-genai call shapes (`client.interactions.create` and
`client.models.generate_content`) as adapters with the neutral `ask` of gemini_clients.

Neutral messages: ("user", text | [parts]), ("assistant", Result), ("tool", call_id, text).
"""
from __future__ import annotations

import base64
import json

from google import genai
from google.genai import types
from google.genai._gaos.types.interactions import createmodelinteraction

from gemini_clients import Result, StreamFailed
from gemini_helpers import GEMINI_KEY, gemini_config
from harness import CLIENT_KEY

INTERACTIONS_KEY = "gi-provider-interactions-SECRET"
# The model the proxy names in the upstream body (the route strips "interactions/").
UPSTREAM_MODEL = "gemini-3-flash-preview"
MODEL = "interactions/" + UPSTREAM_MODEL
# An Interactions client's model toward each provider of the config (the route strips the prefix).
PROVIDER_MODELS = {"chat": "chat/gpt-up", "responses": "responses/resp-up", "anthropic": "anthropic/claude-up",
                   "gemini": "gemini/gemini-3-pro-preview", "interactions": MODEL}
STOPS = {"completed": "end_turn", "requires_action": "tool_use", "incomplete": "max_tokens"}


def interactions_config(mock_url: str, **provider) -> dict:
    """The default providers, a Gemini generateContent one, and `interactions` (model `interactions/<name>`)."""
    config = gemini_config(mock_url)
    config["providers"]["interactions"] = {"protocol": "gemini_interactions", "base_url": mock_url,
                                           "api_key": INTERACTIONS_KEY, "read_idle_timeout_secs": 10, **provider}
    config["routing"]["routes"].append(
        {"name": "interactions", "model_pattern": "^interactions/(.+)$", "provider": "interactions",
         "upstream_model": "$1"})
    return config


def check_request(body: dict) -> None:
    """An Interactions request body: it validates as the SDK's own CreateModelInteraction."""
    createmodelinteraction.CreateModelInteraction.model_validate(body)


def sent(mock, stream: bool = False) -> dict:
    """The last request the Interactions mock received: its path, auth and body checked."""
    assert mock.requests, "the provider received nothing"
    record = mock.requests[-1]
    assert record.method == "POST" and record.path == "/v1beta/interactions", (record.method, record.path)
    assert record.headers["x-goog-api-key"] == INTERACTIONS_KEY
    assert "authorization" not in record.headers and CLIENT_KEY not in json.dumps(record.headers)
    body = record.body
    check_request(body)
    assert body["model"] == UPSTREAM_MODEL
    assert bool(body.get("stream")) == stream, body.get("stream")
    return body


def steps_of(body: dict) -> list[dict]:
    """The request's input as a list of steps (a string input: one user_input step)."""
    value = body["input"]
    if isinstance(value, str):
        return [{"type": "user_input", "content": [{"type": "text", "text": value}]}]
    if value and value[0].get("type") not in ("user_input", "model_output", "thought", "function_call",
                                               "function_result"):
        return [{"type": "user_input", "content": value}]  # a content list
    return value


def genai_client(proxy) -> genai.Client:
    """The SDK's client on the proxy, without its retries (the Interactions calls retry 429
    and 5xx by default, which would hide an error behind the mock's next reply)."""
    return genai.Client(api_key=CLIENT_KEY, http_options=types.HttpOptions(
        base_url=proxy.url, retry_options=types.HttpRetryOptions(attempts=1)))


def _dump(model) -> dict:
    return model.model_dump(mode="json", exclude_none=True, by_alias=True)


class Interactions:
    """google-genai `client.interactions.create`; an assistant turn goes back as its steps."""
    name = "interactions"

    def __init__(self, proxy):
        self.client = genai_client(proxy)

    def _input(self, messages):
        out = []
        for m in messages:
            if m[0] == "user":
                content = [{"type": "text", "text": m[1]}] if isinstance(m[1], str) else [self._part(p) for p in m[1]]
                out.append({"type": "user_input", "content": content})
            elif m[0] == "assistant":
                out.extend(m[1].raw["steps"])
            else:
                out.append({"type": "function_result", "call_id": m[1], "result": m[2]})
        return out

    @staticmethod
    def _part(p):
        if p["type"] == "text":
            return {"type": "text", "text": p["text"]}
        return {"type": "image", "data": p["data"], "mime_type": p["media_type"]}

    def ask(self, model, messages, stream=False, system=None, tools=None, tool_choice=None, max_tokens=None,
            schema=None, effort=None, **extra):
        kw: dict = {"model": model, "input": self._input(messages), "store": False}
        config: dict = {}
        if system:
            kw["system_instruction"] = system
        if tools:
            kw["tools"] = [{"type": "function", **{k: v for k, v in t.items() if v is not None}} for t in tools]
        if tool_choice:
            config["tool_choice"] = ({"allowed_tools": {"mode": "validated", "tools": [tool_choice[1]]}}
                                     if isinstance(tool_choice, tuple) else
                                     {"required": "any"}.get(tool_choice, tool_choice))
        if max_tokens:
            config["max_output_tokens"] = max_tokens
        if effort:
            config["thinking_level"] = effort
            config["thinking_summaries"] = "auto"
        if schema:
            kw["response_format"] = {"type": "text", "mime_type": "application/json", "schema": schema}
        for key in ("temperature", "top_p", "seed", "stop_sequences"):
            if key in extra:
                config[key] = extra.pop(key)
        if config:
            kw["generation_config"] = config
        kw.update(extra)
        if stream:
            interaction = self._streamed(kw)
        else:
            interaction = _dump(self.client.interactions.create(**kw))
        return self.result(interaction)

    def _streamed(self, kw) -> dict:
        """The Interaction a stream describes, rebuilt from its events (as a client does)."""
        steps: dict[int, dict] = {}
        arguments: dict[int, str] = {}
        final, events = None, []
        for event in self.client.interactions.create(stream=True, **kw):
            data = _dump(event)
            events.append(data)
            kind = data["event_type"]
            if kind == "error":
                raise StreamFailed(json.dumps(events))
            if kind == "step.start":
                steps[data["index"]] = step = data["step"]
                if step["type"] == "function_call":
                    arguments[data["index"]] = ""
            elif kind == "step.delta":
                step, delta = steps[data["index"]], data["delta"]
                if delta["type"] == "text":
                    content = step.setdefault("content", [])
                    if not content or content[-1].get("type") != "text":
                        content.append({"type": "text", "text": ""})
                    content[-1]["text"] += delta["text"]
                elif delta["type"] == "thought_summary":
                    summary = step.setdefault("summary", [])
                    if not summary:
                        summary.append({"type": "text", "text": ""})
                    summary[-1]["text"] += delta["content"]["text"]
                elif delta["type"] == "thought_signature":
                    step["signature"] = delta["signature"]
                elif delta["type"] == "arguments_delta":
                    arguments[data["index"]] += delta["arguments"]
                else:
                    step.setdefault("content", []).append({k: v for k, v in delta.items()})
            elif kind == "step.stop" and data["index"] in arguments:
                steps[data["index"]]["arguments"] = json.loads(arguments[data["index"]] or "{}")
            elif kind == "interaction.completed":
                final = data["interaction"]
        assert final is not None, f"the stream has no interaction.completed: {events}"
        assert all(e["event_id"] for e in events), "an event without an event_id"
        return {**final, "steps": [steps[i] for i in sorted(steps)], "events": events}

    @staticmethod
    def result(interaction: dict) -> Result:
        steps = interaction.get("steps") or []
        text = "".join(c["text"] for s in steps if s["type"] == "model_output"
                       for c in s.get("content") or () if c["type"] == "text")
        reasoning = ["".join(c.get("text", "") for c in s.get("summary") or ()) for s in steps if s["type"] == "thought"]
        calls = [(s["id"], s["name"], s["arguments"]) for s in steps if s["type"] == "function_call"]
        u = interaction.get("usage") or {}
        usage = {"input": u.get("total_input_tokens"), "output": u.get("total_output_tokens"),
                 "cached": u.get("total_cached_tokens"), "reasoning": u.get("total_thought_tokens")}
        replay = {"steps": [{k: v for k, v in s.items()} for s in steps]}
        result = Result(text, [r for r in reasoning if r], calls, STOPS.get(interaction["status"], interaction["status"]),
                        usage, replay)
        result.interaction = interaction
        return result


class GenerateContent:
    """google-genai `client.models.generate_content`; an assistant turn goes back as its content."""
    name = "gemini"

    def __init__(self, proxy):
        self.client = genai_client(proxy)

    def _contents(self, messages):
        out: list = []
        for m in messages:
            if m[0] == "user":
                parts = ([types.Part(text=m[1])] if isinstance(m[1], str) else
                         [types.Part(text=p["text"]) if p["type"] == "text" else
                          types.Part.from_bytes(data=base64.b64decode(p["data"]), mime_type=p["media_type"])
                          for p in m[1]])
                out.append(types.Content(role="user", parts=parts))
            elif m[0] == "assistant":
                out.append(m[1].raw)
            else:
                name = next(n for i, n, _ in _calls_before(messages, m) if i == m[1])
                part = types.Part(function_response=types.FunctionResponse(id=m[1], name=name, response={"output": m[2]}))
                if out and out[-1].role == "user" and out[-1].parts[0].function_response:
                    out[-1].parts.append(part)
                else:
                    out.append(types.Content(role="user", parts=[part]))
        return out

    def ask(self, model, messages, stream=False, system=None, tools=None, tool_choice=None, max_tokens=None,
            schema=None, effort=None, **extra):
        config: dict = {}
        if system:
            config["system_instruction"] = system
        if tools:
            config["tools"] = [types.Tool(function_declarations=[
                types.FunctionDeclaration(name=t["name"], description=t.get("description"),
                                          parameters_json_schema=t.get("parameters")) for t in tools])]
        if tool_choice:
            mode = {"required": "ANY", "auto": "AUTO", "none": "NONE"}
            fc = (types.FunctionCallingConfig(mode="ANY", allowed_function_names=[tool_choice[1]])
                  if isinstance(tool_choice, tuple) else types.FunctionCallingConfig(mode=mode[tool_choice]))
            config["tool_config"] = types.ToolConfig(function_calling_config=fc)
        if max_tokens:
            config["max_output_tokens"] = max_tokens
        if schema:
            config["response_mime_type"] = "application/json"
            config["response_json_schema"] = schema
        if effort:
            config["thinking_config"] = types.ThinkingConfig(thinking_level=effort.upper(), include_thoughts=True)
        config.update(extra)
        cfg = types.GenerateContentConfig(**config) if config else None
        contents = self._contents(messages)
        if stream:
            chunks = list(self.client.models.generate_content_stream(model=model, contents=contents, config=cfg))
        else:
            chunks = [self.client.models.generate_content(model=model, contents=contents, config=cfg)]
        parts = [p for c in chunks if c.candidates for p in (c.candidates[0].content.parts or [])]
        final = chunks[-1]
        text = "".join(p.text for p in parts if p.text and not p.thought)
        reasoning = ["".join(p.text for p in parts if p.text and p.thought)]
        calls = [(p.function_call.id, p.function_call.name, p.function_call.args) for p in parts if p.function_call]
        u = final.usage_metadata
        usage = {"input": u.prompt_token_count, "output": u.candidates_token_count,
                 "cached": u.cached_content_token_count, "reasoning": u.thoughts_token_count} if u else {}
        finish = final.candidates[0].finish_reason if final.candidates else None
        stop = {types.FinishReason.STOP: "end_turn", types.FinishReason.MAX_TOKENS: "max_tokens"}.get(finish, finish)
        if stop == "end_turn" and calls:
            stop = "tool_use"
        result = Result(text, [r for r in reasoning if r], calls, stop, usage,
                        types.Content(role="model", parts=_merged(parts)))
        result.parts = parts
        return result


def _calls_before(messages, message):
    for m in messages[: messages.index(message)]:
        if m[0] == "assistant":
            yield from m[1].calls


def _merged(parts):
    """A streamed answer's parts as one content: consecutive plain texts joined (the SDK's users do)."""
    out: list = []
    for p in parts:
        if (out and p.text is not None and out[-1].text is not None and not p.thought and not out[-1].thought
                and not p.thought_signature):
            out[-1] = types.Part(text=out[-1].text + p.text, thought_signature=out[-1].thought_signature)
        else:
            out.append(p)
    return out


__all__ = ["Interactions", "GenerateContent", "interactions_config", "sent", "steps_of", "check_request",
           "MODEL", "UPSTREAM_MODEL", "INTERACTIONS_KEY", "GEMINI_KEY", "PROVIDER_MODELS", "StreamFailed"]
