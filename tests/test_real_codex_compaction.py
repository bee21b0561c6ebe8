"""The pinned Codex CLI compacting a session through the proxy, and compressing its HTTP
requests, toward Anthropic, Chat and Gemini providers.

Which compaction Codex runs depends on the provider entry's `name` (Codex 0.171,
model-provider/src/provider.rs): a provider named "OpenAI" (or an Azure one) gets remote
compaction v2, a `compaction_trigger` input item the server must answer with exactly one
`compaction` item; any other name gets local compaction, a normal Responses request whose
last user message is Codex's summarisation prompt, the answer's text kept as the summary
(a user message behind Codex's summary prefix). Either runs mid-turn when, after a tool
call, the context Codex counts (the last response's usage.total_tokens plus an estimate of
what came after) reaches `model_auto_compact_token_limit`. The mock reports a large usage
on the tool-call turn only and small ones elsewhere, so Codex compacts once and the
compacted history lands far under the limit.

Each run must exit 0 with the final text, its command's output must reach the compaction
request, and the provider request after it must carry the summary in place of the tool
traffic. With `supports_websockets = false` and `features.enable_request_compression`,
signed in with ChatGPT toward a provider named OpenAI (the only case where Codex compresses),
every Responses request reaches the proxy as a zstd body.
"""

from __future__ import annotations

import base64
import json
import time
from dataclasses import replace

import pytest

from test_real_clients import (FINAL, OUTPUT, PROMPT, CALL_IDS, agent_script, base_env, check_upstream, cli,
                               generation_requests, proxy_to, run, tool_results)
from harness import CLIENT_KEY
from proxai.mock import Text, Turn
from proxai.mock.turn import Usage
from proxai.observability import capture

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PROVIDERS = ["anthropic_messages", "openai_chat_completions", "gemini_generate_content"]

COMPACT_LIMIT = 60_000
# Above the limit, under the 95% of the default model's 272k window that Codex treats as full.
LARGE_USAGE = Usage(input_tokens=120_000, output_tokens=50)
SUMMARY = f"Handoff: the user asked for one shell command; it ran and printed {OUTPUT}. Report that."
# Codex's local summarisation prompt (prompts/templates/compact/prompt.md) and the prefix it puts
# before the summary it keeps.
CODEX_PROMPT = "You are performing a CONTEXT CHECKPOINT COMPACTION."
CODEX_PREFIX = "Another language model started to solve this problem and produced a summary"
# The proxy's summarisation prompt and prefix (rules/tables/context_management.yaml).
PROXY_PROMPT = "Above is the transcript of a task in progress. Summarise it."
PROXY_PREFIX = "The conversation before this point was compacted into the following summary:"


def codex_config(proxy_url: str, name: str, websockets: bool, chatgpt: bool = False) -> str:
    return "\n".join([
        'model_provider = "proxai"',
        "check_for_update_on_startup = false",
        f"model_auto_compact_token_limit = {COMPACT_LIMIT}",
        # Signed in with ChatGPT, Codex also calls the ChatGPT backend (apps over MCP): kept local.
        f'chatgpt_base_url = "{proxy_url}/backend-api"',
        "",
        "[features]",
        "enable_request_compression = true",
        "apps = false",
        "",
        "[model_providers.proxai]",
        f'name = "{name}"',
        f'base_url = "{proxy_url}/v1"',
        # Signed in with ChatGPT, Codex sends its access token as the bearer; otherwise the env key.
        "requires_openai_auth = true" if chatgpt else 'env_key = "PROXAI_API_KEY"',
        'wire_api = "responses"',
        f"supports_websockets = {str(websockets).lower()}",
        "",
        "[analytics]",
        "enabled = false",
        "",
    ])


def codex_env(home, proxy_url: str, name: str = "ProxAI", websockets: bool = True, chatgpt: bool = False) -> dict:
    env = base_env(home)
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True)
    (codex_home / "config.toml").write_text(codex_config(proxy_url, name, websockets, chatgpt))
    if chatgpt:
        (codex_home / "auth.json").write_text(json.dumps(chatgpt_login()))
    env.update({"CODEX_HOME": str(codex_home), "PROXAI_API_KEY": CLIENT_KEY})
    return env


def _jwt(claims: dict) -> str:
    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()
    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}.sig"


def chatgpt_login() -> dict:
    """Codex's auth.json after "Sign in with ChatGPT", with unsigned tokens that stay fresh for
    the run (Codex reads the claims, the proxy takes the access token as any client key)."""
    exp = int(time.time()) + 3600
    auth = {"chatgpt_plan_type": "pro", "chatgpt_account_id": "acct-proxai", "chatgpt_user_id": "user-proxai"}
    return {"auth_mode": "chatgpt", "OPENAI_API_KEY": None, "last_refresh": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "tokens": {"id_token": _jwt({"email": "codex@example.com", "exp": exp, "https://api.openai.com/auth": auth}),
                       "access_token": _jwt({"exp": exp, "https://api.openai.com/auth": auth}),
                       "refresh_token": "refresh-proxai", "account_id": "acct-proxai"}}


def compacting(prompt: str):
    def script(record):
        """agent_script, with a usage above the limit on the tool-call turn; the summarisation
        request (whose prompt is `prompt`) answered with SUMMARY once the command's output is in
        it; a request carrying the summary answered with the final text."""
        text = json.dumps(record.body)
        if prompt in text:
            return Turn([Text(SUMMARY if OUTPUT in text else "Nothing has run yet.")])
        if SUMMARY in text:
            return Turn([Text(FINAL)])
        turn = agent_script(record)
        return replace(turn, usage=LARGE_USAGE) if turn.has_tool_calls() else turn
    return script


def run_codex(start_proxy, harness, mock, tmp_path, provider_protocol, script, name="ProxAI", websockets=True,
              config=None, chatgpt=False):
    codex = cli("codex")
    mock.responder = script
    proxy = start_proxy(config) if config else proxy_to(start_proxy, harness, provider_protocol, "*")
    work = tmp_path / "work"
    work.mkdir()
    result = run([codex, "exec", "--skip-git-repo-check", PROMPT],
                 codex_env(tmp_path / "home", proxy.url, name, websockets, chatgpt), work)
    assert result.returncode == 0, f"stdout: {result.stdout}\nstderr: {result.stderr}"
    assert FINAL in result.stdout
    return result


def check_compacted_once(mock, provider_protocol: str, prompt: str, prefix: str) -> None:
    """One summarisation request reached the provider, with the command's output in it; the
    next request carries the summary behind `prefix`, and no longer the tool traffic."""
    generation = generation_requests(mock, provider_protocol)
    asked = [i for i, r in enumerate(generation) if prompt in json.dumps(r.body)]
    assert len(asked) == 1, [json.dumps(r.body)[-300:] for r in generation]
    compaction = generation[asked[0]]
    assert OUTPUT in tool_results(compaction)[CALL_IDS[provider_protocol]]
    after = generation[asked[0] + 1:]
    assert after, "no provider request after the compaction"
    text = json.dumps(after[0].body)
    assert SUMMARY in text and prefix in text, text[-2000:]
    assert CALL_IDS[provider_protocol] not in tool_results(after[0])


@pytest.mark.parametrize("provider_protocol", PROVIDERS)
def test_codex_compacts_locally(start_proxy, harness, mock, tmp_path, provider_protocol):
    """A provider entry not named OpenAI: Codex summarises with its own prompt, over the WebSocket."""
    run_codex(start_proxy, harness, mock, tmp_path, provider_protocol, compacting(CODEX_PROMPT))
    check_upstream(mock, provider_protocol)
    check_compacted_once(mock, provider_protocol, CODEX_PROMPT, CODEX_PREFIX)


@pytest.mark.parametrize("provider_protocol", PROVIDERS)
def test_codex_compacts_remotely(start_proxy, harness, mock, tmp_path, provider_protocol):
    """A provider entry named OpenAI: Codex sends compaction_trigger, the proxy has the routed
    model summarise (its own prompt) and answers one compaction item, which Codex sends back
    on the next request and the proxy expands into the summary."""
    run_codex(start_proxy, harness, mock, tmp_path, provider_protocol, compacting(PROXY_PROMPT), name="OpenAI")
    check_upstream(mock, provider_protocol)
    check_compacted_once(mock, provider_protocol, PROXY_PROMPT, PROXY_PREFIX)
    assert not any(CODEX_PROMPT in json.dumps(r.body) for r in generation_requests(mock, provider_protocol))


# Codex compresses only signed in with ChatGPT toward a provider named OpenAI (core/src/client.rs,
# responses_request_compression), and so signed in it sends a `configuration_update` input item
# (the turn's reasoning effort), whose effort the proxy makes the request's toward a translated provider.
@pytest.mark.parametrize("provider_protocol", [*PROVIDERS, "openai_responses"])
def test_codex_compresses_its_http_requests(start_proxy, harness, mock, tmp_path, monkeypatch, provider_protocol):
    """Without the WebSocket every turn is a POST /v1/responses, its body zstd-compressed; what
    reaches the provider is plain JSON."""
    monkeypatch.setenv("PROXAI_HOME", str(tmp_path / "proxai"))
    config = proxy_to(lambda doc: doc, harness, provider_protocol, "*")
    config["capture"] = {"inbound_request": True}
    run_codex(start_proxy, harness, mock, tmp_path, provider_protocol, agent_script, name="OpenAI", websockets=False,
              config=config, chatgpt=True)
    check_upstream(mock, provider_protocol, replays_reasoning=True)
    inbound = [capture.Captured("inbound_request", path.read_bytes())
               for path in sorted((tmp_path / "proxai" / "captures").glob("*.inbound_request.http"))]
    turns = [c for c in inbound if c.start_line.startswith("POST /v1/responses ")]
    assert len(turns) >= 2, [c.start_line for c in inbound]  # the tool call's turn and its result's
    assert all(c.header("content-encoding") == "zstd" for c in turns), [c.header("content-encoding") for c in turns]
    # What reached the provider was plain JSON.
    assert all("content-encoding" not in r.headers for r in generation_requests(mock, provider_protocol))
