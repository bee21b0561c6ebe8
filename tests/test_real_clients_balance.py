"""The real coding-agent CLIs over a `sticky` route of three deployments: a whole agent
session (its tool loop included) stays on one deployment, keyed on what the CLI itself
sends (Claude Code: the session in `metadata.user_id`; Codex: `prompt_cache_key`)."""

from __future__ import annotations

import pytest

from test_real_clients import CLAUDE_CODE, FINAL, PROMPT, agent_script, claude_code, claude_env, cli, codex_env, run
from test_resilience_e2e import ANTHROPIC, RESPONSES, provider, upstreams  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def sticky_route(ups: dict, protocol: str, pattern: str) -> dict:
    extra = {"max_tokens_default": 4096} if protocol == ANTHROPIC else {}
    return {
        "providers": {name: provider(protocol, up.url, key=f"sk-{name}-SECRET", read_idle_timeout_secs=30, **extra)
                      for name, up in ups.items()},
        "routing": {"routes": [{"name": "agent", "model_pattern": pattern, "providers": list(ups),
                                "strategy": "sticky", "upstream_model": "upstream-model"}]},
        "state": {"backend": "memory"},
    }


def agent_deployments(upstreams) -> dict:
    ups = {name: upstreams() for name in ("a", "b", "c")}
    for up in ups.values():
        up.responder = agent_script
    return ups


def generation(ups: dict) -> dict[str, list]:
    return {name: [r for r in up.requests if r.body and "count_tokens" not in r.path and "input_tokens" not in r.path]
            for name, up in ups.items()}


def test_a_claude_code_session_stays_on_one_deployment(start_proxy, upstreams, tmp_path):
    claude = claude_code(list(CLAUDE_CODE)[-1])  # the newest pinned version
    ups = agent_deployments(upstreams)
    proxy = start_proxy(sticky_route(ups, ANTHROPIC, "claude-*"))
    work = tmp_path / "work"
    work.mkdir()
    result = run([claude, "-p", PROMPT, "--allowedTools", "Bash"], claude_env(tmp_path / "home", proxy.url), work)
    assert result.returncode == 0, f"stdout: {result.stdout}\nstderr: {result.stderr}"
    assert FINAL in result.stdout
    sessions = {name: [r for r in reqs if "session" in str((r.body.get("metadata") or {}).get("user_id", ""))]
                for name, reqs in generation(ups).items()}
    used = [name for name, reqs in sessions.items() if reqs]
    assert len(used) == 1, {name: len(reqs) for name, reqs in sessions.items()}
    assert len(sessions[used[0]]) >= 2  # the tool call's turn and the turn with its result


def test_a_codex_session_stays_on_one_deployment(start_proxy, upstreams, tmp_path):
    codex = cli("codex")
    ups = agent_deployments(upstreams)
    proxy = start_proxy(sticky_route(ups, RESPONSES, "*"))
    work = tmp_path / "work"
    work.mkdir()
    result = run([codex, "exec", "--skip-git-repo-check", PROMPT],
                 codex_env(tmp_path / "home", proxy.url), work)
    assert result.returncode == 0, f"stdout: {result.stdout}\nstderr: {result.stderr}"
    assert FINAL in result.stdout
    keyed = {name: [r for r in reqs if r.body.get("prompt_cache_key")] for name, reqs in generation(ups).items()}
    used = [name for name, reqs in keyed.items() if reqs]
    assert len(used) == 1, {name: len(reqs) for name, reqs in keyed.items()}
    assert len(keyed[used[0]]) >= 2
