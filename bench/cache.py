"""Prompt caching cost benchmark: what fraction of an agent session's input is billed
as cache reads when a Chat or Responses client reaches Anthropic through the proxy.

    python -m bench.cache [--turns N] [--json FILE]

One recorded-shape session (bench/agent_session.py) is replayed turn by turn:

- through the proxy by a Chat Completions client and by a Responses client, with the
  Anthropic provider's ``prompt_caching`` set to ``auto`` and to ``off``;
- directly by an Anthropic client that sets its own breakpoints (Claude Code's layout).

The provider is a mock Anthropic Messages server that bills the way Anthropic does:
a request reads from the cache only a prefix that ends at a breakpoint of an earlier
request (looking back up to 20 blocks from each of its own breakpoints, at least the
model's minimum length); its breakpoints write their prefixes; tokens after the last
breakpoint are billed as plain input. Each replay starts with an empty cache; TTLs
do not expire within a replay (it takes seconds). The reported fraction is computed
from the usage each client received (so it also checks the usage translation), and
compared with the mock's own ledger.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web

from bench import agent_session

CHAT, RESPONSES, ANTHROPIC = "openai_chat_completions", "openai_responses", "anthropic_messages"
PATHS = {CHAT: "/v1/chat/completions", RESPONSES: "/v1/responses", ANTHROPIC: "/v1/messages"}
MODEL = "claude-sonnet-4-5"
MIN_PREFIX = 1024          # Sonnet 4.5's minimum cacheable prefix
LOOKBACK = 20              # blocks Anthropic looks back from a breakpoint for an earlier write
CHARS_PER_TOKEN = 4.0      # the mock's own token count (the proxy estimates with 3.5)


# --- the billing mock ----------------------------------------------------------------------------


def _blocks(body: dict) -> list[tuple[bytes, int, dict | None]]:
    """(canonical bytes, tokens, cache_control) per block, in Anthropic's prefix order."""
    items: list = list(body.get("tools") or ())
    system = body.get("system")
    items += [{"type": "text", "text": system}] if isinstance(system, str) else list(system or ())
    for msg in body.get("messages") or ():
        content = msg["content"] if isinstance(msg["content"], list) else [{"type": "text", "text": msg["content"]}]
        items += [{"_role": msg["role"], **b} for b in content]
    out = []
    for item in items:
        control = item.get("cache_control")
        data = orjson.dumps({k: v for k, v in item.items() if k != "cache_control"}, option=orjson.OPT_SORT_KEYS)
        out.append((data, max(1, round(len(data) / CHARS_PER_TOKEN)), control))
    return out


@dataclass
class Ledger:
    input_tokens: int = 0
    cache_read: int = 0
    cache_write: int = 0
    requests: int = 0
    breakpoints: list = field(default_factory=list)


class BillingAnthropic:
    """Anthropic Messages, non-streaming, with Anthropic's prompt-cache billing."""

    def __init__(self) -> None:
        self.cache: set[bytes] = set()
        self.ledger = Ledger()
        self.app = web.Application(client_max_size=64 * 1024 * 1024)
        self.app.router.add_post("/v1/messages", self.messages)

    def reset(self) -> None:
        self.cache.clear()
        self.ledger = Ledger()

    def bill(self, body: dict) -> dict:
        blocks = _blocks(body)
        prefix, hashes, cum, total = hashlib.sha256(), [], [], 0
        for data, tokens, _ in blocks:
            prefix.update(data)
            hashes.append(prefix.copy().digest())
            total += tokens
            cum.append(total)
        marks = [k for k, (_, _, control) in enumerate(blocks) if control]
        if isinstance(body.get("cache_control"), dict) and blocks:
            marks.append(len(blocks) - 1)  # top-level: the last cacheable block
        marks = sorted(set(marks))
        if len(marks) > 4:
            raise web.HTTPBadRequest(text="A maximum of 4 blocks with cache_control may be provided.")
        read = 0
        for mark in marks:
            for k in range(mark, max(-1, mark - LOOKBACK - 1), -1):
                if hashes[k] in self.cache:
                    read = max(read, cum[k])
                    break
        writes = [m for m in marks if cum[m] >= MIN_PREFIX]
        write = max(0, cum[writes[-1]] - read) if writes else 0
        for mark in writes:
            self.cache.add(hashes[mark])
        ledger = self.ledger
        ledger.requests += 1
        ledger.input_tokens += total
        ledger.cache_read += read
        ledger.cache_write += write
        ledger.breakpoints.append(len(marks))
        return {"input_tokens": total - read - write, "cache_read_input_tokens": read,
                "cache_creation_input_tokens": write,
                "cache_creation": {"ephemeral_5m_input_tokens": write, "ephemeral_1h_input_tokens": 0},
                "output_tokens": 12}

    async def messages(self, request: web.Request) -> web.Response:
        body = await request.json()
        usage = self.bill(body)
        return web.json_response({
            "id": f"msg_bench{self.ledger.requests}", "type": "message", "role": "assistant", "model": body["model"],
            "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn", "stop_sequence": None, "usage": usage})


# --- replay ---------------------------------------------------------------------------------------


def client_usage(protocol: str, body: dict) -> tuple[int, int, int]:
    """(input total, cache reads, cache writes) as the client's own protocol reports them."""
    u = body["usage"]
    if protocol == CHAT:
        d = u.get("prompt_tokens_details") or {}
        return u["prompt_tokens"], d.get("cached_tokens") or 0, d.get("cache_write_tokens") or 0
    if protocol == RESPONSES:
        d = u.get("input_tokens_details") or {}
        return u["input_tokens"], d.get("cached_tokens") or 0, d.get("cache_write_tokens") or 0
    read, write = u.get("cache_read_input_tokens") or 0, u.get("cache_creation_input_tokens") or 0
    return u["input_tokens"] + read + write, read, write


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, handle_signals=False, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


def proxy_config(mock_url: str) -> dict:
    providers = {f"anthropic-{policy}": {"protocol": ANTHROPIC, "base_url": mock_url, "api_key": "bench-key",
                                         "prompt_caching": policy} for policy in ("auto", "off")}
    routes = [{"name": policy, "model_pattern": f"^{policy}/(.+)$", "provider": f"anthropic-{policy}", "upstream_model": "$1"}
              for policy in ("auto", "off")]
    return {"providers": providers, "routing": {"routes": routes}, "logging": {"level": "warning"}}


async def replay(turns: int = 24) -> dict:
    from proxai.http.app import build_app, make_runner
    from proxai.routing.config import load_dict

    session = agent_session.build(turns)
    mock = BillingAnthropic()
    mock_runner, mock_url = await _serve(mock.app)
    app = build_app(load_dict(proxy_config(mock_url), {}))
    proxy_runner = make_runner(app)
    await proxy_runner.setup()
    site = web.TCPSite(proxy_runner, "127.0.0.1", 0)
    await site.start()
    proxy_url = f"http://127.0.0.1:{proxy_runner.addresses[0][1]}"
    cases = [(CHAT, "auto"), (CHAT, "off"), (RESPONSES, "auto"), (RESPONSES, "off"), (ANTHROPIC, "direct")]
    rows = []
    try:
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer bench"}) as http:
            for protocol, policy in cases:
                mock.reset()
                seen = [0, 0, 0]
                for k in range(turns):
                    if policy == "direct":
                        url, model = mock_url + PATHS[protocol], MODEL
                    else:
                        url, model = proxy_url + PATHS[protocol], f"{policy}/{MODEL}"
                    body = agent_session.REQUESTS[protocol](session, k, model)
                    async with http.post(url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}) as resp:
                        answer = await resp.json(content_type=None)
                        if resp.status != 200:
                            raise RuntimeError(f"{protocol} {policy} turn {k}: HTTP {resp.status}: {answer}")
                    for i, n in enumerate(client_usage(protocol, answer)):
                        seen[i] += n
                ledger = mock.ledger
                rows.append({
                    "client": protocol, "policy": policy, "turns": turns, "input_tokens": seen[0],
                    "cache_read_tokens": seen[1], "cache_write_tokens": seen[2],
                    "read_fraction": seen[1] / seen[0] if seen[0] else 0.0,
                    "ledger": {"input_tokens": ledger.input_tokens, "cache_read_tokens": ledger.cache_read,
                               "cache_write_tokens": ledger.cache_write},
                    "breakpoints_per_request": max(ledger.breakpoints or [0]),
                })
    finally:
        await proxy_runner.cleanup()
        await mock_runner.cleanup()
    direct = next(r for r in rows if r["policy"] == "direct")["read_fraction"]
    for r in rows:
        r["points_vs_direct"] = round((r["read_fraction"] - direct) * 100, 1)
    return {"turns": turns, "model": MODEL, "rows": rows,
            "session": {"system_chars": len(session.system), "tools": len(session.tools),
                        "tools_chars": len(json.dumps(session.tools))}}


def markdown(result: dict) -> str:
    s = result["session"]
    lines = [f"Agent session: {result['turns']} model calls, system prompt {s['system_chars']:,} characters, "
             f"{s['tools']} tools ({s['tools_chars']:,} characters), model {result['model']}.", "",
             "| client | prompt_caching | input tokens | cache reads | cache writes | billed as cache reads | vs direct |",
             "|---|---|---:|---:|---:|---:|---:|"]
    names = {CHAT: "Chat Completions", RESPONSES: "Responses", ANTHROPIC: "Anthropic (own breakpoints)"}
    for r in result["rows"]:
        policy = "direct, no proxy" if r["policy"] == "direct" else r["policy"]
        lines.append(f"| {names[r['client']]} | {policy} | {r['input_tokens']:,} | {r['cache_read_tokens']:,} | "
                     f"{r['cache_write_tokens']:,} | {r['read_fraction'] * 100:.1f} % | {r['points_vs_direct']:+.1f} pts |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cache", description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=24, help="model calls in the session (default 24)")
    parser.add_argument("--json", help="also write the result as JSON to this file")
    args = parser.parse_args(argv)
    result = asyncio.run(replay(args.turns))
    for r in result["rows"]:
        seen = (r["input_tokens"], r["cache_read_tokens"], r["cache_write_tokens"])
        billed = tuple(r["ledger"].values())
        if seen != billed:
            print(f"warning: {r['client']} {r['policy']}: the client saw {seen}, the provider billed {billed}", file=sys.stderr)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    sys.stdout.write(markdown(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
