"""The real coding-agent CLIs, headless, through the proxy toward each provider protocol.

Codex CLI (`codex exec`, Responses API), Claude Code (`claude -p`, Messages API; 2.1.197
and 2.1.328, each test once per version) and Gemini CLI (`gemini -p`, Gemini API), as pinned
in tests/clients/package.json, run with their default settings against a scripted mock
upstream of each provider protocol, behind a route that renames the model. The script answers the agent's turn with reasoning and a call
to the agent's own shell tool, and the turn that carries the tool's result with
reasoning and text; each run must finish its tool loop with exit code 0, the command
must really have run (its output reaches the upstream as the tool result), and the
final text must reach the terminal.

The provider's own reasoning state (thinking signature, encrypted_content, thought
signature) must come back to it on the next turn; the mock Anthropic enforces Anthropic's
thinking rules. Besides the shell-tool loop: Claude Code's long session (several tool
turns), `--continue`, `/context` (token counting), its gateway model discovery
(`GET /v1/models`), and an image read by each CLI's own tool (Claude Code's Read, Codex's
view_image) inside a tool result.

The CLIs come from npm (`npm ci --prefix tests/clients`, done by .ci/run); without
Node or without them these tests skip, saying so. They need no internet: every
request goes to 127.0.0.1, and the CLIs' update checks and telemetry are off.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from gemini_helpers import GEMINI_KEY, gemini_config
from harness import CLIENT_KEY, PROVIDER_KEYS
from proxai.mock import Reasoning, Text, ToolCall, Turn
from proxai.mock.upstream import GEMINI_PATH

ROOT = Path(__file__).resolve().parent.parent
CLIENTS = ROOT / "tests" / "clients"
BIN = CLIENTS / "node_modules" / ".bin"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# The command the agent is asked to run, and what only running it prints.
COMMAND = "echo proxai-$((6*7))"
OUTPUT = "proxai-42"
PROMPT = f"Run the shell command `{COMMAND}` and tell me what it printed."
FINAL = f"The command printed {OUTPUT}."
# The agents' shell tools, in order of preference, and the arguments that run COMMAND.
# Codex's default model works in "code mode": one free-form `exec` tool (namespace
# `functions`) runs JavaScript that calls the nested tools; toward providers without
# namespaces or free-form tools it is the function `functions__exec` taking {"input": ...}.
CODE_MODE = f"const result = await tools.exec_command({{cmd: {json.dumps(COMMAND)}}});\ntext(result);"
SHELL_TOOLS = {
    "Bash": lambda: json.dumps({"command": COMMAND, "description": "Print a marker"}),
    "exec_command": lambda: json.dumps({"cmd": COMMAND}),
    "shell_command": lambda: json.dumps({"command": COMMAND}),
    "shell": lambda: json.dumps({"command": ["bash", "-lc", COMMAND]}),
    "functions__exec": lambda: json.dumps({"input": CODE_MODE}),
    "functions.exec": lambda: CODE_MODE,  # Responses: namespace functions, custom tool exec
    # Gemini CLI refuses command substitution: the same marker, printed without it.
    "run_shell_command": lambda: json.dumps({"command": "printf 'proxai-%d\\n' 42", "description": "Print a marker"}),
}
CALL_IDS = {"anthropic_messages": "toolu_proxai_shell_1", "openai_chat_completions": "call_proxai_shell_1",
            "openai_responses": "call_proxai_shell_1", "gemini_generate_content": "fc_proxai_shell_1"}
RUN_TIMEOUT = 240
# Gemini CLI's model router asks for a JSON complexity score; any other answer costs it five
# retries with backoff (about 100 s) before it falls back to its default model.
ROUTER_FIELD = "complexity_score"
ROUTER_ANSWER = json.dumps({"complexity_reasoning": "One shell command.", "complexity_score": 10})


def cli(name: str) -> Path:
    if shutil.which("node") is None:
        pytest.skip("Node.js is not installed; the real-CLI tests need node, npm and `npm ci --prefix tests/clients`")
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{name} is not installed; run `npm ci --prefix tests/clients` (needs the npm registry)")
    return path


# Claude Code, each pinned version: 2.1.328 installs beside 2.1.197 under an npm alias, so each
# runs from its own package's bin (which of the two `.bin/claude` links to is npm's choice).
CLAUDE_CODE = {"2.1.197": "@anthropic-ai/claude-code", "2.1.328": "claude-code-2-1-328"}


def claude_code(version: str) -> Path:
    if shutil.which("node") is None:
        pytest.skip("Node.js is not installed; the real-CLI tests need node, npm and `npm ci --prefix tests/clients`")
    package = CLIENTS / "node_modules" / CLAUDE_CODE[version]
    if not (package / "package.json").exists():
        pytest.skip(f"Claude Code {version} is not installed; run `npm ci --prefix tests/clients` (needs the npm registry)")
    manifest = json.loads((package / "package.json").read_text())
    assert manifest["version"] == version, manifest["version"]
    return package / manifest["bin"]["claude"]


@pytest.fixture(params=list(CLAUDE_CODE))
def claude(request) -> Path:
    """The Claude Code binary, once per pinned version."""
    return claude_code(request.param)


# --- the scripted upstream ----------------------------------------------------------------------


def offered_tools(record) -> dict[str, dict]:
    """The tools a provider request offers, by name (Responses: `namespace.name` inside a
    namespace, wherever declared: `tools` or an `additional_tools` input item)."""
    body = record.body or {}
    out: dict[str, dict] = {}

    def add(tools, namespace=None):
        for tool in tools or []:
            if not isinstance(tool, dict):
                continue
            if "functionDeclarations" in tool:  # Gemini: one Tool of many declarations
                add(tool["functionDeclarations"])
                continue
            if tool.get("type") == "namespace":
                add(tool.get("tools"), tool.get("name"))
                continue
            function = tool.get("function")
            name = function.get("name") if isinstance(function, dict) else tool.get("name")
            if isinstance(name, str):
                out[f"{namespace}.{name}" if namespace else name] = tool

    add(body.get("tools"))
    for item in body.get("input") if isinstance(body.get("input"), list) else []:
        if isinstance(item, dict) and item.get("type") == "additional_tools":
            add(item.get("tools"))
    return out


def tool_results(record) -> dict[str, str]:
    """The tool results a provider request carries, by call id, as text."""
    body = record.body or {}
    out: dict[str, str] = {}
    if record.protocol == "anthropic_messages":
        for message in body.get("messages") or []:
            for block in message.get("content") if isinstance(message.get("content"), list) else []:
                if block.get("type") == "tool_result":
                    out[block["tool_use_id"]] = json.dumps(block.get("content"))
    elif record.protocol == "openai_chat_completions":
        for message in body.get("messages") or []:
            if message.get("role") == "tool":
                out[message["tool_call_id"]] = json.dumps(message.get("content"))
    elif record.protocol == "gemini_generate_content":
        for content in body.get("contents") or []:
            for part in content.get("parts") or []:
                if isinstance(part.get("functionResponse"), dict):
                    response = part["functionResponse"]
                    out[response.get("id") or response.get("name")] = json.dumps(response.get("response"))
    else:
        for item in body.get("input") if isinstance(body.get("input"), list) else []:
            if item.get("type") in ("function_call_output", "custom_tool_call_output"):
                out[item["call_id"]] = json.dumps(item.get("output"))
    return out


# What `claude --continue` asks next, and the answer.
AGAIN = "Say once more what it printed."
AGAIN_FINAL = f"Once more: {OUTPUT}."


def agent_script(record):
    """One agent turn: call the shell tool, then, given its output, say what it printed.
    Side requests (titles, summaries, quota probes) get a short text."""
    call_id = CALL_IDS[record.protocol]
    if AGAIN in json.dumps(record.body):
        return Turn([Text(AGAIN_FINAL)])
    if call_id in tool_results(record):
        return Turn([Reasoning("The command ran; I can report its output.", signature="sig-mock-2",
                               encrypted_content="enc-mock-2", summary=True), Text(FINAL)])
    offered = offered_tools(record)
    shell = next((name for name in SHELL_TOOLS if name in offered), None)
    if ROUTER_FIELD in json.dumps(record.body):
        return Turn([Text(ROUTER_ANSWER)])
    if shell is None or PROMPT not in json.dumps(record.body):
        return Turn([Text("OK")])
    namespace, _, name = shell.rpartition(".")
    custom = offered[shell].get("type") == "custom"
    call = ToolCall(call_id, name, SHELL_TOOLS[shell](), custom=custom, namespace=namespace or None)
    return Turn(reasoned("I should run the command the user gave.", "mock-1", call, record.protocol))


def reasoned(thought: str, state: str, call: ToolCall, protocol: str) -> list:
    """A tool-call turn's blocks with the provider's reasoning state (`sig-STATE`, `enc-STATE`)
    where the provider puts it: Gemini 3 signs the function call part itself."""
    if protocol == "gemini_generate_content":
        return [Reasoning(thought), replace(call, thought_signature=f"sig-{state}")]
    return [Reasoning(thought, signature=f"sig-{state}", encrypted_content=f"enc-{state}", summary=True), call]


def counting(record) -> bool:
    return record.path.endswith(("/count_tokens", "/input_tokens", ":countTokens"))


def generation_requests(mock, provider_protocol: str) -> list:
    """The provider's billed requests (no token counting), in order."""
    return [r for r in mock.requests if r.protocol == provider_protocol and r.body and not counting(r)]


def model_of(record) -> str | None:
    """The model a provider request names (Gemini: in the path)."""
    match = GEMINI_PATH.match(record.path)
    return match.group(1) if match else (record.body or {}).get("model")


def authorized(record, provider_protocol: str) -> bool:
    if provider_protocol == "anthropic_messages":
        return record.headers.get("x-api-key") == PROVIDER_KEYS["anthropic"]
    if provider_protocol == "gemini_generate_content":
        return record.headers.get("x-goog-api-key") == GEMINI_KEY
    return record.headers.get("authorization") == f"Bearer {PROVIDER_KEYS[PROVIDERS[provider_protocol]]}"


# The provider's own reasoning state in a request, as each provider's wire carries it: an
# Anthropic thinking signature, Responses encrypted_content, a Gemini thoughtSignature. Chat has none.
OPAQUE_FIELD = {"anthropic_messages": "signature", "openai_responses": "encrypted_content",
                "gemini_generate_content": "thoughtSignature"}


def opaque_state(record) -> list[str]:
    """Every reasoning-state value in a provider request, in order."""
    field = OPAQUE_FIELD.get(record.protocol)
    found: list[str] = []

    def walk(value):
        if isinstance(value, dict):
            for key, item in value.items():
                if key == field and isinstance(item, str):
                    found.append(item)
                else:
                    walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    if field:
        walk((record.body or {}).get("messages" if record.protocol == "anthropic_messages" else
                                     "input" if record.protocol == "openai_responses" else "contents"))
    return found


def check_upstream(mock, provider_protocol: str, replays_reasoning: bool = False) -> None:
    """The tool's real output reached the provider, as the result of the call the provider made."""
    generation = generation_requests(mock, provider_protocol)
    assert generation, [r.path for r in mock.requests]
    call_id = CALL_IDS[provider_protocol]
    with_result = [r for r in generation if call_id in tool_results(r)]
    assert with_result, "the tool result never reached the upstream"
    assert OUTPUT in tool_results(with_result[0])[call_id]
    assert all(authorized(r, provider_protocol) for r in generation)
    # A client that replays reasoning gets the provider's own opaque state back to it, through
    # the client's own form when translated; Chat has none to carry.
    if replays_reasoning and provider_protocol in OPAQUE_FIELD:
        assert MOCK_STATE[provider_protocol] in opaque_state(with_result[0]), \
            "the reasoning of the tool-call turn was not replayed"
    assert all(CLIENT_KEY.encode() not in r.raw for r in generation)
    assert {model_of(r) for r in generation} == {UPSTREAM_MODEL}


def run(argv: list, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    try:
        return subprocess.run([str(a) for a in argv], env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"{argv[0]} did not finish in {RUN_TIMEOUT}s\nstdout: {exc.stdout}\nstderr: {exc.stderr}")


def base_env(home: Path) -> dict:
    """A clean environment: a private HOME, no proxies, nothing inherited that could reach out."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "TERM": "dumb", "NO_COLOR": "1", "NO_PROXY": "127.0.0.1,localhost"}
    home.mkdir(parents=True, exist_ok=True)
    return env


PROVIDERS = {"anthropic_messages": "anthropic", "openai_responses": "responses", "openai_chat_completions": "chat",
             "gemini_generate_content": "gemini"}
# The opaque state agent_script's tool-call turn carries, as the provider sends it.
MOCK_STATE = {"anthropic_messages": "sig-mock-1", "openai_responses": "enc-mock-1", "gemini_generate_content": "sig-mock-1"}


@pytest.fixture
def agent_upstream(mock):
    mock.responder = agent_script
    return mock


UPSTREAM_MODEL = "upstream-model"


def proxy_to(start_proxy, harness, provider_protocol: str, pattern: str, thinking_mode: str | None = None):
    """A proxy as the client pages' recipes (docs/clients/) configure it: one route takes the CLI's own model names
    (they keep their defaults) to the provider, under the provider's model name."""
    cfg = gemini_config(harness.mock_url)
    if thinking_mode:
        cfg["providers"]["anthropic"]["thinking_mode"] = thinking_mode
    cfg["routing"] = {"routes": [{"name": "agent", "model_pattern": pattern, "provider": PROVIDERS[provider_protocol],
                                  "upstream_model": UPSTREAM_MODEL}]}
    return start_proxy(cfg)


# --- Claude Code ----------------------------------------------------------------------------------


def claude_env(home: Path, proxy_url: str) -> dict:
    env = base_env(home)
    env.update({
        "ANTHROPIC_BASE_URL": proxy_url,
        "ANTHROPIC_AUTH_TOKEN": CLIENT_KEY,
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        # no update checks, telemetry, error reports or other traffic besides the API
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
    })
    return env


# Tool search (deferred tools, tool_reference blocks) is what Claude Code recommends for proxies.
@pytest.mark.parametrize("tool_search", [False, True], ids=["default", "tool-search"])
@pytest.mark.parametrize("provider_protocol", list(PROVIDERS))
def test_claude_code_tool_loop(claude, start_proxy, harness, agent_upstream, tmp_path, provider_protocol, tool_search):
    proxy = proxy_to(start_proxy, harness, provider_protocol, "claude-*")
    work = tmp_path / "work"
    work.mkdir()
    env = claude_env(tmp_path / "home", proxy.url)
    if tool_search:
        env["ENABLE_TOOL_SEARCH"] = "true"
    # --allowedTools grants the shell tool in headless mode (-p cannot ask for permission)
    result = run([claude, "-p", PROMPT, "--allowedTools", "Bash"], env, work)
    assert result.returncode == 0, f"stdout: {result.stdout}\nstderr: {result.stderr}"
    assert FINAL in result.stdout
    # The route renames the model; Claude Code keeps the signed thinking of an answer only when
    # the answer names the model it asked for, so the provider's state comes back on turn 2.
    check_upstream(agent_upstream, provider_protocol, replays_reasoning=True)


# A long session: several tool turns in one run, each with reasoning of its own.
STEPS = 3
LONG_PROMPT = "Run these shell commands one at a time, then tell me what they printed: " + ", ".join(
    f"`echo proxai-step-$((6*{k}))`" for k in range(1, STEPS + 1))
LONG_FINAL = "They printed " + ", ".join(f"proxai-step-{6 * k}" for k in range(1, STEPS + 1)) + "."


def step_id(protocol: str, k: int) -> str:
    return CALL_IDS[protocol].replace("shell_1", f"step_{k}")


def long_session_script(record):
    """Step k calls Bash with reasoning whose state is `mock-step-k`; once every step's result is
    back, the final text. Side requests get a short text."""
    if LONG_PROMPT not in json.dumps(record.body) or "Bash" not in offered_tools(record):
        return Turn([Text("OK")])
    results = tool_results(record)
    done = sum(step_id(record.protocol, k) in results for k in range(1, STEPS + 1))
    if done == STEPS:
        return Turn([Reasoning("Every command ran.", signature="sig-mock-final", encrypted_content="enc-mock-final",
                               summary=True), Text(LONG_FINAL)])
    k = done + 1
    call = ToolCall(step_id(record.protocol, k), "Bash",
                    json.dumps({"command": f"echo proxai-step-$((6*{k}))", "description": f"Step {k}"}))
    return Turn(reasoned(f"Step {k} comes next.", f"mock-step-{k}", call, record.protocol))


@pytest.mark.parametrize("provider_protocol", list(PROVIDERS))
def test_claude_code_long_session(claude, start_proxy, harness, mock, tmp_path, provider_protocol):
    """Several tool turns through the renaming route: every command runs, and each request
    carries back the provider's reasoning state of every earlier step (the enforcing Anthropic
    mock refuses a tool result whose turn lost its thinking)."""
    mock.responder = long_session_script
    proxy = proxy_to(start_proxy, harness, provider_protocol, "claude-*")
    work = tmp_path / "work"
    work.mkdir()
    result = run([claude, "-p", LONG_PROMPT, "--allowedTools", "Bash"], claude_env(tmp_path / "home", proxy.url), work)
    assert result.returncode == 0, f"stdout: {result.stdout}\nstderr: {result.stderr}"
    assert LONG_FINAL in result.stdout
    generation = generation_requests(mock, provider_protocol)
    assert {model_of(r) for r in generation} == {UPSTREAM_MODEL}
    for k in range(1, STEPS + 1):
        turn = next((r for r in generation if step_id(provider_protocol, k) in tool_results(r)), None)
        assert turn is not None, f"the result of step {k} never reached the provider"
        assert f"proxai-step-{6 * k}" in tool_results(turn)[step_id(provider_protocol, k)]
        if provider_protocol in OPAQUE_FIELD:
            prefix = "enc" if provider_protocol == "openai_responses" else "sig"
            state = opaque_state(turn)
            assert [f"{prefix}-mock-step-{j}" for j in range(1, k + 1)] == [v for v in state if "-mock-step-" in v], \
                f"step {k}: {state}"


@pytest.mark.parametrize("provider_protocol", list(PROVIDERS))
def test_claude_code_continue(claude, start_proxy, harness, agent_upstream, tmp_path, provider_protocol):
    """`claude --continue` resumes the last session: its history (the tool result, the provider's
    reasoning state) goes to the provider again, under the model name Claude Code asked for
    first: the route only takes `claude-*`, so a session switched to the upstream name fails."""
    proxy = proxy_to(start_proxy, harness, provider_protocol, "claude-*")
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    first = run([claude, "-p", PROMPT, "--allowedTools", "Bash"], claude_env(home, proxy.url), work)
    assert first.returncode == 0, f"stdout: {first.stdout}\nstderr: {first.stderr}"
    before = len(agent_upstream.requests)
    again = run([claude, "--continue", "-p", AGAIN, "--allowedTools", "Bash"], claude_env(home, proxy.url), work)
    assert again.returncode == 0, f"stdout: {again.stdout}\nstderr: {again.stderr}"
    assert AGAIN_FINAL in again.stdout
    resumed = [r for r in generation_requests(agent_upstream, provider_protocol)[0:]
               if r in agent_upstream.requests[before:] and AGAIN in json.dumps(r.body)]
    assert resumed, [r.path for r in agent_upstream.requests[before:]]
    assert OUTPUT in json.dumps(tool_results(resumed[0]))
    assert model_of(resumed[0]) == UPSTREAM_MODEL
    if provider_protocol in OPAQUE_FIELD:
        assert MOCK_STATE[provider_protocol] in opaque_state(resumed[0]), opaque_state(resumed[0])
    transcripts = "".join(p.read_text() for p in (home / ".claude").rglob("*.jsonl"))
    assert transcripts and UPSTREAM_MODEL not in transcripts


# --- Codex CLI -------------------------------------------------------------------------------------


def codex_config(proxy_url: str, model: str | None) -> str:
    return "\n".join([
        *([f'model = "{model}"'] if model else []),
        'model_provider = "proxai"',
        "check_for_update_on_startup = false",
        "",
        "[model_providers.proxai]",
        'name = "ProxAI"',
        f'base_url = "{proxy_url}/v1"',
        'env_key = "PROXAI_API_KEY"',
        'wire_api = "responses"',
        "",
        "[analytics]",
        "enabled = false",
        "",
    ])


def codex_env(home: Path, proxy_url: str, model: str | None = None) -> dict:
    env = base_env(home)
    codex_home = home / ".codex"
    codex_home.mkdir()
    (codex_home / "config.toml").write_text(codex_config(proxy_url, model))
    env.update({"CODEX_HOME": str(codex_home), "PROXAI_API_KEY": CLIENT_KEY})
    return env


# Codex's default model works in code mode (a free-form `exec` tool in a namespace); a model
# outside its catalog gets the classic tool set (exec_command, a namespace of function
# tools, the hosted web_search).
@pytest.mark.parametrize("model", [None, "claude-sonnet-4-5"], ids=["default-model", "model-outside-catalog"])
@pytest.mark.parametrize("provider_protocol", list(PROVIDERS))
def test_codex_tool_loop(start_proxy, harness, agent_upstream, tmp_path, provider_protocol, model):
    codex = cli("codex")
    proxy = proxy_to(start_proxy, harness, provider_protocol, "*")
    work = tmp_path / "work"
    work.mkdir()
    result = run([codex, "exec", "--skip-git-repo-check", PROMPT], codex_env(tmp_path / "home", proxy.url, model), work)
    assert result.returncode == 0, f"stdout: {result.stdout}\nstderr: {result.stderr}"
    assert FINAL in result.stdout
    check_upstream(agent_upstream, provider_protocol, replays_reasoning=True)


# --- Gemini CLI ------------------------------------------------------------------------------------


def gemini_env(home: Path, proxy_url: str) -> dict:
    env = base_env(home)
    settings = home / ".gemini"
    settings.mkdir()
    # An API key (ours) toward GOOGLE_GEMINI_BASE_URL; no telemetry or usage statistics.
    (settings / "settings.json").write_text(json.dumps({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "telemetry": {"enabled": False},
        "privacy": {"usageStatisticsEnabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
    }))
    env.update({"GOOGLE_GEMINI_BASE_URL": proxy_url, "GEMINI_API_KEY": CLIENT_KEY,
                "GEMINI_CLI_TRUST_WORKSPACE": "true"})
    return env


# Gemini CLI (generateContent / streamGenerateContent, Gemini's wire) toward each provider
# protocol: its model router's side request, then the agent's turns with its own
# run_shell_command tool (offered in headless mode with --yolo).
@pytest.mark.parametrize("provider_protocol", list(PROVIDERS))
def test_gemini_cli_tool_loop(start_proxy, harness, agent_upstream, tmp_path, provider_protocol):
    gemini = cli("gemini")
    # Toward Anthropic, thinking with a budget (type enabled): the mock then holds the tool
    # result's turn to Anthropic's rule, its thinking block signed and unchanged.
    proxy = proxy_to(start_proxy, harness, provider_protocol, "gemini-*", thinking_mode="budget")
    work = tmp_path / "work"
    work.mkdir()
    result = run([gemini, "-p", PROMPT, "--yolo"], gemini_env(tmp_path / "home", proxy.url), work)
    assert result.returncode == 0, f"stdout: {result.stdout}\nstderr: {result.stderr}"
    assert FINAL in result.stdout
    # Gemini CLI keeps no thought parts in its history, but keeps the signature on the first
    # functionCall part: the provider's reasoning state (an Anthropic thinking signature,
    # Responses encrypted reasoning), carried there, reaches the provider again on the turn
    # with the tool result; the mock Anthropic refuses that turn without its thinking block.
    check_upstream(agent_upstream, provider_protocol, replays_reasoning=True)
    if provider_protocol == "anthropic_messages":
        turn = next(r for r in agent_upstream.requests if CALL_IDS[provider_protocol] in tool_results(r))
        assert turn.body["thinking"]["type"] == "enabled"
        assistant = [m for m in turn.body["messages"] if m["role"] == "assistant"][-1]["content"]
        assert assistant[0] == {"type": "thinking", "thinking": "I should run the command the user gave.",
                                "signature": "sig-mock-1"}, assistant


@pytest.mark.parametrize("provider_protocol", list(PROVIDERS))
def test_claude_code_context_counts_tokens(claude, start_proxy, harness, agent_upstream, tmp_path, provider_protocol):
    """`/context` counts each part of the context with /v1/messages/count_tokens: answered by the
    provider's counting endpoint (translated toward Responses) or estimated for Chat, never by
    billed generation requests."""
    proxy = proxy_to(start_proxy, harness, provider_protocol, "claude-*")
    work = tmp_path / "work"
    work.mkdir()
    result = run([claude, "-p", "/context"], claude_env(tmp_path / "home", proxy.url), work)
    assert result.returncode == 0, f"stdout: {result.stdout}\nstderr: {result.stderr}"
    assert "Context Usage" in result.stdout
    paths = [r.path for r in agent_upstream.requests]
    expected = {"anthropic_messages": "/v1/messages/count_tokens", "openai_responses": "/v1/responses/input_tokens",
                "gemini_generate_content": f"/v1beta/models/{UPSTREAM_MODEL}:countTokens"}
    if provider_protocol in expected:
        counts = [r for r in agent_upstream.requests if r.path == expected[provider_protocol]]
        assert counts and len(counts) == len(paths), paths
        assert all(model_of(r) == UPSTREAM_MODEL
                   and ("messages" in r.body or "input" in r.body or "generateContentRequest" in r.body)
                   for r in counts)
    else:
        assert paths == []  # estimated by the proxy


def test_claude_code_discovers_gateway_models(claude, start_proxy, harness, agent_upstream, tmp_path):
    """Claude Code's gateway model discovery reads GET /v1/models in Anthropic's shape."""
    cfg = harness.default_config()
    cfg["providers"]["responses"]["models"] = ["claude-proxai-gpt-5", "gpt-5"]
    cfg["routing"] = {"routes": [{"name": "claude-code", "model_pattern": "claude-*", "provider": "responses"}]}
    proxy = start_proxy(cfg)
    work = tmp_path / "work"
    work.mkdir()
    home = tmp_path / "home"
    env = claude_env(home, proxy.url)
    # discovery is "nonessential" traffic; the other switches keep telemetry and updates off
    del env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"]
    env["CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY"] = "1"
    result = run([claude, "-p", "say hi"], env, work)
    assert result.returncode == 0, f"stdout: {result.stdout}\nstderr: {result.stderr}"
    caches = list(home.rglob("gateway-models.json"))
    assert caches, sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    cache = json.loads(caches[0].read_text())
    assert [m["id"] for m in cache["models"]] == ["claude-proxai-gpt-5"]
    assert any(r.path == "/v1/responses" for r in agent_upstream.requests)  # and the turn was served


def png(width: int = 8, height: int = 8) -> bytes:
    """A small valid RGB PNG."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def images_in(record) -> int:
    """Image parts anywhere in a provider request (any protocol's form)."""
    text = json.dumps(record.body or {})
    return (text.count('"type": "image"') + text.count('"type": "image_url"') + text.count('"type": "input_image"')
            + text.count('"inlineData"'))


@pytest.mark.parametrize("provider_protocol", list(PROVIDERS))
def test_claude_code_reads_an_image(claude, start_proxy, harness, mock, tmp_path, provider_protocol):
    """Claude Code's Read tool returns a PNG as an image inside the tool result; every provider
    gets it in a form it takes (toward Chat: in a user message after the tool message)."""
    proxy = proxy_to(start_proxy, harness, provider_protocol, "claude-*")
    work = tmp_path / "work"
    work.mkdir()
    picture = work / "pixel.png"
    picture.write_bytes(png())
    prompt = f"Describe the image in {picture}."
    call_id = CALL_IDS[provider_protocol]

    def script(record):
        if call_id in tool_results(record):
            return Turn([Text("A red square.")])
        if "Read" in offered_tools(record) and prompt in json.dumps(record.body):
            return Turn([ToolCall(call_id, "Read", json.dumps({"file_path": str(picture)}))])
        return Turn([Text("OK")])

    mock.responder = script
    result = run([claude, "-p", prompt, "--allowedTools", "Read"], claude_env(tmp_path / "home", proxy.url), work)
    assert result.returncode == 0, f"stdout: {result.stdout}\nstderr: {result.stderr}"
    assert "A red square." in result.stdout
    with_result = [r for r in mock.requests if call_id in tool_results(r)]
    assert with_result and images_in(with_result[0]) >= 1
    if provider_protocol == "openai_chat_completions":
        messages = with_result[0].body["messages"]
        at = next(i for i, m in enumerate(messages) if m.get("role") == "tool" and m.get("tool_call_id") == call_id)
        after = messages[at + 1]
        assert after["role"] == "user" and '"image_url"' in json.dumps(after["content"])


@pytest.mark.parametrize("provider_protocol", list(PROVIDERS))
def test_codex_views_an_image(start_proxy, harness, mock, tmp_path, provider_protocol):
    """Codex's view_image puts the picture into the tool output; every provider takes it."""
    codex = cli("codex")
    proxy = proxy_to(start_proxy, harness, provider_protocol, "*")
    work = tmp_path / "work"
    work.mkdir()
    picture = work / "pixel.png"
    picture.write_bytes(png())
    prompt = f"Look at the image {picture} and describe it."
    call_id = CALL_IDS[provider_protocol]

    def script(record):
        if call_id in tool_results(record):
            return Turn([Text("A red square.")])
        if "view_image" in offered_tools(record) and prompt in json.dumps(record.body):
            return Turn([ToolCall(call_id, "view_image", json.dumps({"path": str(picture)}))])
        return Turn([Text("OK")])

    mock.responder = script
    # a model outside Codex's catalog: the classic tool set, where view_image is a plain function
    env = codex_env(tmp_path / "home", proxy.url, "claude-sonnet-4-5")
    result = run([codex, "exec", "--skip-git-repo-check", prompt], env, work)
    assert result.returncode == 0, f"stdout: {result.stdout}\nstderr: {result.stderr}"
    assert "A red square." in result.stdout
    with_result = [r for r in mock.requests if call_id in tool_results(r)]
    assert with_result and images_in(with_result[0]) >= 1
