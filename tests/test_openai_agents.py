"""openai-agents' Chat Completions model (OpenAIChatCompletionsModel) with reasoning, through the
proxy toward an Anthropic provider that enforces Anthropic's thinking rule: a tool loop, its
requests as the Agents SDK itself builds them (streaming or not), and what the provider got on the
turn with the tool result.

The SDK keeps a Chat answer's `reasoning_content` as a reasoning item, but by default replays it
only toward DeepSeek models; with `should_replay_reasoning_content` it goes back, and the proxy's
continuation envelope in it gives Anthropic its signed thinking block again. Without it the
reasoning state is gone, and that turn must still be served (thinking off, as Anthropic requires).
"""

from __future__ import annotations

import asyncio
import json

import pytest
from agents import Agent, ModelSettings, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from openai import AsyncOpenAI
from openai.types.shared import Reasoning as ReasoningSettings

from harness import CLIENT_KEY
from proxai.mock import Reasoning, Text, ToolCall, Turn

set_tracing_disabled(True)  # tracing would export to OpenAI's platform

UPSTREAM_MODEL = "upstream-model"
CALL_ID = "toolu_agents_1"
THOUGHT = "The user wants the marker; I call the tool."
FINAL = "The tool said proxai-42."


@function_tool
def marker() -> str:
    """Print the marker."""
    return "proxai-42"


def script(record):
    """The tool call with signed thinking, then (given the tool's output) the answer."""
    if CALL_ID in json.dumps((record.body or {}).get("messages")):
        return Turn([Reasoning("It answered.", signature="sig-agents-2"), Text(FINAL)])
    return Turn([Reasoning(THOUGHT, signature="sig-agents-1"), ToolCall(CALL_ID, "marker", "{}")])


def run_agent(proxy_url: str, stream: bool, replay: bool) -> str:
    async def main() -> str:
        client = AsyncOpenAI(base_url=proxy_url + "/v1", api_key=CLIENT_KEY, max_retries=0)
        model = OpenAIChatCompletionsModel(
            model="agents-model", openai_client=client,
            **({"should_replay_reasoning_content": lambda context: True} if replay else {}))
        agent = Agent(name="marker", instructions="Use the marker tool.", model=model, tools=[marker],
                      model_settings=ModelSettings(reasoning=ReasoningSettings(effort="high")))
        if not stream:
            return (await Runner.run(agent, "What does the marker tool print?")).final_output
        result = Runner.run_streamed(agent, "What does the marker tool print?")
        async for _ in result.stream_events():
            pass
        return result.final_output

    return asyncio.run(main())


@pytest.mark.parametrize("thinking_mode", ["adaptive", "budget"])
@pytest.mark.parametrize("replay", [True, False], ids=["replayed", "default"])
@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_reasoning_state_across_a_tool_loop(start_proxy, harness, mock, stream, replay, thinking_mode):
    cfg = harness.default_config()
    cfg["providers"]["anthropic"]["thinking_mode"] = thinking_mode
    cfg["routing"] = {"routes": [{"name": "agents", "model_pattern": "agents-*", "provider": "anthropic",
                                  "upstream_model": UPSTREAM_MODEL}]}
    proxy = start_proxy(cfg)
    mock.responder = script
    assert run_agent(proxy.url, stream, replay) == FINAL
    first, second = [r for r in mock.requests if r.path == "/v1/messages"]
    assert first.body["model"] == second.body["model"] == UPSTREAM_MODEL
    assert first.body["thinking"]["type"] == {"adaptive": "adaptive", "budget": "enabled"}[thinking_mode]
    assistant = [m for m in second.body["messages"] if m["role"] == "assistant"][-1]["content"]
    assert assistant[-1]["type"] == "tool_use" and assistant[-1]["id"] == CALL_ID
    if replay:
        # the provider's own signed thinking, unchanged, before the tool call, and thinking still on
        assert assistant[0] == {"type": "thinking", "thinking": THOUGHT, "signature": "sig-agents-1"}, assistant
        assert second.body["thinking"] == first.body["thinking"]
    else:
        # no state to restore: that request goes with thinking off, not a thinking block forged
        assert all(b["type"] not in ("thinking", "redacted_thinking") for b in assistant), assistant
        assert second.body.get("thinking", {"type": "disabled"}) == {"type": "disabled"}, second.body.get("thinking")
