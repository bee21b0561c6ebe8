"""The loop toward a streaming client: every round is a streamed provider call, and the
client's one stream is written as its events arrive.

Each round's provider stream is decoded by a decoder of its own; the IR events then go
through one encoder for the whole client stream (one message_start, block indexes that
keep increasing across rounds, one terminal event with the rounds' usage summed). A
block that calls a server tool is held back (its arguments are the proxy's to read), and
so is a round's terminal event when it called one: the tools run, the client gets their
call and result blocks, and the next round's events continue the same answer.
"""

from __future__ import annotations

import asyncio
from typing import Any

from engine.stream import StreamRun
from proxai.http import errors as E
from proxai.http.server_tools.loop import Loop, add_usage, server_calls
from proxai.http.streaming import HEARTBEAT, Outcome, StreamLoop, TranslatedStream


def _part(ev: dict) -> dict:
    """The IR part a block_start opens (what the next provider request carries of it)."""
    kind = ev.get("kind")
    fields = {k: v for k, v in ev.items() if k not in ("type", "index", "kind")}
    if kind == "redacted_reasoning":
        return {"type": "reasoning", "text": None, "opaque": ev.get("opaque")}
    if kind in ("tool_call", "server_tool_call"):
        return {**fields, "type": kind, "arguments": ""}
    return {**fields, "type": kind, "text": ""} if kind in ("text", "reasoning", "refusal") else {**fields, "type": kind}


class Round:
    """What one provider stream said: its parts in order, the client index of each block."""

    def __init__(self):
        self.parts: dict[Any, dict] = {}  # provider block index -> IR part
        self.client_index: dict[Any, int] = {}
        self.held: set = set()  # blocks of server tool calls
        self.stop: dict | None = None  # its terminal event, held back when it called server tools
        self.ended = False

    @property
    def content(self) -> list:
        return list(self.parts.values())


class RoundDecoder:
    """A round's provider stream decoder, its IR events fitted into the client's stream."""

    def __init__(self, run: StreamRun, stream: "LoopStream"):
        self.run, self.stream = run, stream

    def decode(self, payload) -> list:
        return self.stream.fit(self.run.decode(payload))

    def handle_eof(self) -> list:
        return self.stream.fit(self.run.handle_eof())


class LoopStream(TranslatedStream):
    """The observer of every round's StreamLoop: one client stream, a round at a time."""

    def __init__(self, engine, ctx, loop: Loop):
        super().__init__(engine.open_stream(ctx))
        self.rules, self.ctx, self.loop = engine.streams[("stream.decode", ctx.provider_protocol)], ctx, loop
        self.started = False
        self.next_index = 0
        self.begin()

    def begin(self) -> None:
        self.round = Round()
        self.outcome = None
        self.translator.decoder = RoundDecoder(StreamRun(self.rules, self.ctx), self)

    def eof(self) -> list[bytes]:
        if self.round.ended:  # the round's terminal event is held: the answer goes on
            self.outcome = self.outcome or Outcome.COMPLETE
            return []
        return super().eof()

    def fit(self, events: list) -> list:
        r, out = self.round, []
        for ev in events:
            kind = ev["type"]
            if r.ended:
                continue
            if kind == "message_start":
                if not self.started:
                    self.started = True
                    out.append(ev)
                continue  # a later round continues the message the client has open
            if kind == "block_start":
                part = r.parts[ev["index"]] = _part(ev)
                if part["type"] == "tool_call" and self.loop.is_server(part.get("name")):
                    r.held.add(ev["index"])
                    continue
                r.client_index[ev["index"]] = self.next_index
                self.next_index += 1
                out.append({**ev, "index": r.client_index[ev["index"]]})
            elif kind in ("block_delta", "block_opaque", "block_stop"):
                i = ev["index"]
                part = r.parts.get(i)
                if part is not None and kind == "block_delta" and isinstance(ev.get("delta"), str):
                    key = "arguments" if "arguments" in part else "text"
                    if part.get(key) is not None:
                        part[key] += ev["delta"]
                elif part is not None and kind == "block_opaque":
                    part["opaque"] = ev.get("opaque")
                if i not in r.held:
                    out.append({**ev, "index": r.client_index.get(i, i)})
            elif kind == "message_stop":
                self.loop.usage = add_usage(self.loop.usage, ev.get("usage"))
                r.stop = ev
                if r.held:
                    r.ended = True  # the tools run first (LoopRelay)
                    self.outcome = Outcome.COMPLETE
                    continue
                out.append({**ev, "usage": self.loop.usage})
            else:
                out.append(ev)
        return out

    def show(self, parts: list) -> list[bytes]:
        """The client blocks of server tool runs."""
        events: list = []
        for part in parts:
            index = self.next_index
            self.next_index += 1
            kind = part["type"]
            if kind == "server_tool_call":
                events.append({**{k: v for k, v in part.items() if k not in ("type", "arguments")},
                               "type": "block_start", "index": index, "kind": kind})
                events.append({"type": "block_delta", "index": index, "kind": kind, "delta": part.get("arguments") or "{}"})
            else:  # web_search_call, web_search_result, tool_search_result: whole at their start
                events.append({**part, "type": "block_start", "index": index, "kind": kind})
            events.append({"type": "block_stop", "index": index})
        return self.translator.push(events)

    def finish(self, paused: bool) -> list[bytes]:
        """The client's terminal event after a round whose terminal event was held."""
        stop = {**self.round.stop, "usage": self.loop.usage}
        if paused:
            stop["stop"] = "pause_turn"
        return self.translator.push([stop])


class LoopRelay:
    """A StreamLoop per round, to the app's stream serving as one relay (prime, run, stop)."""

    def __init__(self, proxy, request, match, loop: Loop, upstream, info: dict, fetch):
        self.proxy, self.request, self.match, self.loop, self.info, self.fetch = proxy, request, match, loop, info, fetch
        # The rounds' observer; `observer` is what each StreamLoop feeds (an inspector may wrap it).
        self.stream = self.observer = LoopStream(proxy.engine, loop.ctx, loop)
        self.provider_name = match.provider.name
        protocol = info.get("client_protocol")
        self.heartbeat = proxy.config.server.stream_heartbeat_secs if proxy.engine.wire.comments_allowed(protocol) else 0
        self.relay = self._relay(upstream)
        self._stopping = False

    def _relay(self, upstream) -> StreamLoop:
        provider = self.match.provider
        return StreamLoop(upstream, self.observer, idle_timeout=provider.read_idle_timeout_secs,
                          tool_call_timeout=self.proxy.config.tool_call_timeout_secs, provider_name=provider.name,
                          max_event_bytes=self.proxy.config.server.max_sse_event_bytes, heartbeat=self.heartbeat,
                          idle_guarded=True)

    async def prime(self) -> None:
        await self.relay.prime()

    @property
    def primed(self) -> bytes:
        return self.relay.primed

    @property
    def outcome(self) -> Outcome:
        return self.relay.outcome

    def stop(self) -> None:
        self._stopping = True
        self.relay.stop()

    async def run(self, client) -> Outcome:
        observer, loop = self.stream, self.loop
        try:
            while True:
                self.relay.observer = self.observer  # an inspector may have wrapped it since
                outcome = await self.relay.run(client)
                r = observer.round
                if not r.ended or not outcome.complete:
                    return outcome
                calls, client_calls = server_calls(loop, r.content)
                ran = await self._beating(client, loop.run(calls))
                await client.write(b"".join(observer.show([q for c in calls for q in ran[c.get("id") or ""].shown])))
                stop = (r.stop or {}).get("stop")
                if not loop.may_continue(stop, client_calls):
                    await client.write(b"".join(observer.finish(loop.paused(stop, client_calls))))
                    return Outcome.COMPLETE
                if self._stopping:
                    await client.write(b"".join(observer.translator.fail(Outcome.SHUTDOWN.kind, "the proxy is shutting down", 503)))
                    return Outcome.SHUTDOWN
                try:
                    upstream = await self._beating(client, self.fetch(loop.next_request(r.content, ran)))
                except E.ProxyError as exc:
                    # The client has its 200 and the rounds so far: the failure ends its stream.
                    await client.write(b"".join(observer.translator.fail(
                        getattr(exc, "error_type", None) or "upstream_error", exc.message, exc.status)))
                    return Outcome.UPSTREAM_ERROR
                observer.begin()
                self.relay = self._relay(upstream)
        except (ConnectionResetError, ConnectionError):
            return Outcome.CLIENT_DISCONNECTED
        finally:
            await loop.close()

    async def _beating(self, client, coro):
        """`coro`'s result; a heartbeat comment for each quiet interval while it runs."""
        if not self.heartbeat:
            return await coro
        task = asyncio.ensure_future(coro)
        while True:
            done, _ = await asyncio.wait({task}, timeout=self.heartbeat)
            if done:
                return task.result()
            await client.write(HEARTBEAT)
