"""The aiohttp front: ingress, admission, routing, pass-through or translation, errors."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import time
import traceback
from typing import Any

import aiohttp
import orjson
from aiohttp import web

import engine

from proxai.observability import capture, inspector, tracing

from proxai.routing import clients, limits, pools, retry, turn_state

from proxai.endpoints import count_tokens, gemini_client, models_endpoint, responses_state, state_spec

from proxai.http import ingress, origin, paths, requestid, serving

from proxai.operations import readiness, reload, shutdown
from proxai.endpoints import compaction, conversations
from proxai.http import response_model, server_tools
from proxai.endpoints import background
from proxai.endpoints import responses_ws
from proxai.endpoints import responses_compact
from proxai.routing.caching import caching_context
from proxai.http import errors as E
from proxai.routing.config import Config, ProviderConfig, RouteConfig, ServerConfig, StateConfig
from proxai.protocols import ANTHROPIC, CHAT, GEMINI, INTERACTIONS, RESPONSES
from proxai.observability.logs import add_earlier_usage, log_request, usage_fields
from proxai.observability.metrics import Metrics
from proxai.http.origin import is_loopback as _is_loopback
from proxai.http.relay import Relay
from proxai.http.surface import CAPTURE_KEY, INFO_KEY, PROXY_KEY, dump_json, json_response  # noqa: F401  (re-exported)
from proxai.http.streaming import Outcome, StreamLoop, TranslatedStream
from proxai.routing.routes import RouteMatch, Router
from proxai.http.transport import Transport, provider_headers, read_body, upstream_url
from engine.wire import Target

log = logging.getLogger("proxai")

REQUEST_ID_HEADER = requestid.HEADER
# Hosted tools left out of a translated request (hosted_tools: drop), comma-separated.
DROPPED_TOOLS_HEADER = "x-proxai-dropped-tools"
SSE_CONTENT_TYPE = "text/event-stream; charset=utf-8"



def protocol_for_path(app: web.Application):
    """The client protocol of a path; other paths answer in the closest family's shape."""
    surface = app[PROXY_KEY].paths
    return lambda path, headers=None: surface.protocol_for(path, headers or {})


class Proxy:
    def __init__(self, config: Config, *, demo: bool = False):
        self.demo = demo
        # Rules load once per generation, here and on reload; a broken rule file (built-in or
        # the config's rules_dir) stops startup with file:line rather than failing requests later.
        self.live: reload.Generation = reload.prepare(config, with_router=not demo)
        # The client paths of the protocols the rules describe (fixed for the process: routes are).
        self.paths = paths.Surface(self.engine.wire)
        self.transport = Transport(pool_size=max(100, config.server.max_concurrent_requests))
        self.active = 0
        phases = [phase for phase, on in config.capture.items() if on]
        # None when capture is off: the request path then creates no capture object at all.
        self.recorder = capture.Recorder(phases) if phases else None
        settings = config.server.inspector
        self.inspector = inspector.Inspector(settings.max_requests, self.recorder and self.recorder.root) if settings.enabled else None
        self.metrics = Metrics(in_flight=lambda: self.active, config=lambda: self.config)
        self.state = responses_state.build(config, self.metrics)  # None: state.backend none
        self.limits = limits.Limits(self.state.store if self.state is not None else None)
        # a no-op unless tracing.enabled and the otel extra; the GenAI names come from the rules
        self.tracing = tracing.setup(config.tracing, describe=lambda protocol: self.engine.gen_ai(protocol))
        self.readiness = readiness.Readiness()
        self.readiness.add("rules", lambda: None if self.live.engine.codecs else "no rules loaded")
        if self.state is not None:
            # A shared store that is down degrades this pod (stateful Responses turns get 503),
            # unless state.required_for_readiness says it takes the pod out of rotation.
            self.readiness.add("state_store", self.state.ready, required=config.state.required_for_readiness)
        if demo:
            self.readiness.add("demo_upstreams", lambda: None if self.live.router is not None else "starting")
        self._mock_runner: web.AppRunner | None = None
        self.open_streams = shutdown.OpenStreams()
        self.background = background.Runs()  # the background responses this process runs
        self.resilience = retry.Resilience(config, self.metrics.registry)

    # --- the generation (config, router, rules) the current request started on ---------

    @property
    def config(self) -> Config:
        return reload.current(self).config

    @property
    def router(self) -> Router | None:
        return reload.current(self).router

    @property
    def engine(self) -> engine.Engine:
        return reload.current(self).engine

    # Assigning one part replaces the live generation with that part changed.
    @config.setter
    def config(self, value: Config) -> None:
        self.live = dataclasses.replace(self.live, config=value)

    @router.setter
    def router(self, value: Router | None) -> None:
        self.live = dataclasses.replace(self.live, router=value)

    @engine.setter
    def engine(self, value: engine.Engine) -> None:
        self.live = dataclasses.replace(self.live, engine=value)

    def swap(self, generation: reload.Generation) -> None:
        """Make `generation` live for requests that start from now on."""
        phases = [phase for phase, on in generation.config.capture.items() if on]
        if set(phases) != set(self.recorder.phases if self.recorder else ()):
            self.recorder = capture.Recorder(phases) if phases else None
        self.resilience.pools = pools.Pools(generation.config)  # providers and keys may have changed
        self.live = generation

    # --- lifecycle ---------------------------------------------------------------

    async def on_startup(self, app: web.Application) -> None:
        if self.state is not None:
            await self.state.start()  # first: a local store that cannot open stops startup (StateError)
        await self.resilience.start(self.state.store if self.state is not None else None)
        await self.transport.start()
        if self.demo:
            await self._start_demo_upstreams()

    async def on_cleanup(self, app: web.Application) -> None:
        await self.transport.close()
        if self.state is not None:
            await self.state.stop()
        self.tracing.shutdown()
        await self.resilience.stop()
        if self._mock_runner is not None:
            await self._mock_runner.cleanup()

    async def _start_demo_upstreams(self) -> None:
        from proxai.mock import MockUpstream

        mock = MockUpstream(system_in_place=True)
        runner = web.AppRunner(mock.app, handle_signals=False, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        self._mock_runner = runner
        port = runner.addresses[0][1]
        config = demo_config(f"http://127.0.0.1:{port}", self.config.server, self.config.capture)
        self.live = dataclasses.replace(self.live, config=config, router=Router(config))
        self.resilience.pools = pools.Pools(config)

    # --- request handling ------------------------------------------------------------

    async def handle(self, request: web.Request) -> web.StreamResponse:
        info: dict[str, Any] = request[INFO_KEY]
        protocol = self.paths.generate[paths.canonical(request.path)]
        # where the protocol's clients send their key (headers.client_key), else the common headers
        self.authorize(request, self.engine.wire.client_key(protocol, request.headers, request.rel_url.query))
        raw = await self.admit(request, info)
        with self.slot(), self.tracing.request(request.headers, request.method, request.path, info):
            return await self._proxy(request, protocol, info, raw)

    async def admit(self, request: web.Request, info: dict) -> bytes:
        """Open the request's capture and read its body, bounded in size and time, before it
        takes a concurrency slot (a slow upload holds no slot)."""
        if self.recorder is not None:
            request[CAPTURE_KEY] = self.recorder.open(info["request_id"])
        if self.inspector is not None:
            request[CAPTURE_KEY] = self.inspector.open(info, request.get(CAPTURE_KEY))
        server = self.config.server
        raw = await ingress.read(request, server.max_request_body_bytes, server.request_body_timeout_secs)
        client = info.get("_client")
        if client is not None and client.limited:
            await self.limits.admit(client)
        return raw

    def capture_inbound(self, request: web.Request, raw: bytes) -> None:
        """For the endpoints that do not go through admit (token counting, the model list):
        open the request's capture, when capture is on, with the client's request."""
        if self.recorder is None or request.get(CAPTURE_KEY) is not None:
            return
        cap = request[CAPTURE_KEY] = self.recorder.open(request[INFO_KEY]["request_id"])
        version = f"HTTP/{request.version.major}.{request.version.minor}"
        cap.whole("inbound_request", f"{request.method} {request.path_qs} {version}", request.headers.items(), raw)

    def route(self, model: str, protocol: str, info: dict) -> RouteMatch:
        """The route for `model` from a `protocol` client, noted for the request's log line."""
        match = self.router.resolve(model, protocol)
        info.update(route=match.route, provider=match.provider.name, provider_protocol=match.provider.protocol,
                    upstream_model=match.upstream_model)
        return match

    @contextlib.contextmanager
    def slot(self):
        """One of `server.max_concurrent_requests` slots, taken once the body has been read."""
        if self.active >= self.config.server.max_concurrent_requests:
            raise E.Overloaded("the proxy is at its concurrent request limit; retry shortly", headers={"Retry-After": "1"})
        self.active += 1
        shared = self.metrics.shared_in_flight  # None in one process: the gauge reads self.active
        if shared is not None:
            shared.inc()
        try:
            yield
        finally:
            self.active -= 1
            if shared is not None:
                shared.dec()

    def authorize(self, request: web.Request, key: str | None = None) -> None:
        """Check the client key (`key`, else the one in x-api-key or Authorization) against
        server.api_keys; the matched client's name goes on the request's log record."""
        info = request.get(INFO_KEY)
        if key is None:
            key = clients.presented(request.headers)
        else:
            request[clients.PRESENTED_KEY] = key  # the state's tenant is this key (a protocol's own header)
        client = clients.authorize(self.config.server.clients, key, info)
        if client is not None and info is not None:
            info["_client"] = client

    async def _proxy(self, request: web.Request, protocol: str, info: dict[str, Any], raw: bytes) -> web.StreamResponse:
        cap = request.get(CAPTURE_KEY)
        if cap is not None:
            version = f"HTTP/{request.version.major}.{request.version.minor}"
            cap.whole("inbound_request", f"{request.method} {request.path_qs} {version}", request.headers.items(), raw)
        model_field, stream_field = self.engine.wire.body_fields(protocol)
        # the top-level shape: model, stream, types and bounds
        body = ingress.parse(protocol, raw, (model_field, stream_field))
        model = body[model_field]
        stream = bool(body.get(stream_field))
        info.update(model=model, stream=stream)
        assert self.router is not None
        match = self.route(model, protocol, info)
        if background.requested(body) and (state_spec.of(self.engine.wire, protocol) or state_spec.NONE).background:
            return await background.start(self, request, protocol, match, body, info)  # answers at once, runs on
        async with self.limits.stream_slot(info, stream):
            return await self.serve(request, protocol, match, body, raw, stream, info)

    async def serve(self, request: web.Request, protocol: str, match: RouteMatch, body: dict, raw: bytes,
                     stream: bool, info: dict[str, Any]) -> web.StreamResponse:
        provider = match.provider
        plan = self.resilience.pools.plan(match)
        if plan is None:  # one key, no fallbacks: nothing to choose or retry
            return await self._serve_on(request, protocol, provider, match, body, raw, stream, info)
        # Every attempt starts from the request as the client sent it.
        turns: list = []

        async def attempt(provider: ProviderConfig, upstream_model: str) -> web.StreamResponse:
            target = dataclasses.replace(match, provider=provider, upstream_model=upstream_model)
            return await self._serve_on(request, protocol, provider, target, dict(body), raw, stream, info, turns)

        conversation = pools.conversation_key(body, self.engine.wire.user_fields(protocol))
        info["_pooled"] = True
        header = self.engine.wire.turn_state_header(protocol)
        turn = await turn_state.begin(self.resilience.health.store, header, request.headers, info.get("_turn_state")) if header else None
        if turn is not None:  # a Codex turn's requests stay on the key that served its first
            conversation = turn.conversation or conversation
            info.setdefault("_headers", {})[header] = turn.token
        response = await self.resilience.serve(plan, info, conversation, attempt, responses=self.engine.wire.has(protocol, "stored_responses"))
        if turn is not None:
            await turn.served(info.get("key"))
        return response

    async def _serve_on(
        self, request: web.Request, protocol: str, provider: ProviderConfig, match: RouteMatch,
        body: dict, raw: bytes, stream: bool, info: dict, turns: list | None = None,
    ) -> web.StreamResponse:
        # the proxy keeps the state of this protocol's responses (previous_response_id, store)
        spec = state_spec.of(self.engine.wire, protocol) if self.state is not None else None
        stateful = spec is not None
        # conversations are the proxy's own toward every provider, a Responses one included
        conversation = await conversations.begin(self, request, body) \
            if stateful and self.engine.wire.has(protocol, "stored_responses") else None
        if provider.protocol == protocol:
            model_field = self.engine.wire.body_fields(protocol)[0]
            answer_model = response_model.answer_model(match, body[model_field])
            if conversation is not None:
                conversation.resolve(body, provider_holds_ids=True)
            # A previous turn the proxy stored (another provider served it) is unknown to this
            # one: it gets the whole history; a turn it served itself stays its id.
            resolved = conversation is None and stateful and await self.state.resolve_held(request, body, provider.name, spec)
            rewritten = match.upstream_model != body[model_field] or conversation is not None or resolved
            if rewritten:
                body[model_field] = match.upstream_model
            if stateful and body.get("store") is not False:
                info["_owned_id"] = True  # the provider keeps this response: note whose it is (responses_state)
            target = self.engine.wire.target(protocol, "generate", match.upstream_model, stream)
            target = Target(target.path, target.query or request.rel_url.raw_query_string)
            # The rewritten bytes are made in the call, not kept in this frame: passthrough lets go
            # of them once sent, so an open stream does not hold its request body to its end.
            return await self.passthrough(request, protocol, provider, dump_json(body) if rewritten else raw, stream,
                                           info, target, body=body, answer_model=answer_model, conversation=conversation)
        turn = None
        if stateful:
            if turns:  # a retry: the conversation was resolved by the first translated attempt
                turn, body = turns[0]
            else:
                turn = await self.state.begin(request, body, provider.name, spec)  # resolves previous_response_id
                if conversation is not None:
                    turn = conversation.around(turn, body)  # the conversation's items, then the turn's
                if turns is not None:
                    turns.append((turn, body))
        return await self.translate(request, protocol, match, body, stream, info, turn)

    async def passthrough(
        self, request: web.Request, protocol: str, provider: ProviderConfig, raw: bytes, stream: bool, info: dict,
        target: Target, body: dict | None = None, answer_model: str | None = None, conversation=None,
    ) -> web.StreamResponse:
        """`answer_model`: the model name the answer must carry in place of the provider's (response_model)."""
        rewrite = None
        if answer_model is not None:
            rewrite = response_model.rewriter(response_model.answer_key(self.engine.tables, protocol), answer_model)
        upstream = await self.send(request, provider, raw, stream, info, target)
        del raw  # sent: a retry starts again from the client's request (serve), not from these bytes
        try:
            await self.raise_for_status(upstream, provider)
            if not _is_event_stream(upstream):
                if stream:
                    raise E.UpstreamProtocolError(f"provider {provider.name!r} did not answer with an event stream")
                data = await read_body(upstream, provider, cap=self.config.server.max_upstream_body_bytes)
                if "_owned_id" in info:
                    await responses_state.remember_passthrough(self, request, data)
                if conversation is not None:
                    data = await conversation.finish_bytes(data)  # the turn is in the conversation before it goes out
                # Usage, stop and model as the protocol's summary rules read them (an override changes them all).
                summary = self.engine.summary(protocol, data)
                info.update(usage_fields(summary.get("usage")))
                self.tracing.upstream_done(info, protocol, summary)
                if rewrite is not None:
                    data = rewrite(data)
                response = json_response(upstream.status, data, upstream.headers, info, self.engine.wire)
                relayed_type = upstream.headers.get("Content-Type", "")
                if relayed_type and "json" not in relayed_type.lower():
                    response.headers["Content-Type"] = relayed_type  # relayed unchanged: not labelled JSON
                return response
        except BaseException:
            upstream.close()
            raise
        if not stream:
            upstream.close()
            raise E.UpstreamProtocolError(f"provider {provider.name!r} answered a non-streaming request with a stream")
        ctx = engine.Context(client_protocol=protocol, provider_protocol=protocol, provider_name=provider.name,
                             upstream_model=info.get("upstream_model"), client_body=body, response_model=answer_model)
        relay = StreamLoop(
            upstream,
            Relay(protocol, self.engine, ctx),
            idle_timeout=provider.read_idle_timeout_secs,
            tool_call_timeout=self.config.tool_call_timeout_secs,
            provider_name=provider.name,
            max_event_bytes=self.config.server.max_sse_event_bytes,
            idle_guarded=True,  # Transport.send's sock_read is the provider's read_idle_timeout_secs
        )
        relay.rewrite = rewrite
        return await self._stream(request, relay, upstream, info, conversation)

    async def _stream(
        self, request: web.Request, relay: StreamLoop, upstream: aiohttp.ClientResponse, info: dict, turn=None
    ) -> web.StreamResponse:
        if self.inspector is not None:
            relay.observer = self.inspector.watch(relay.observer, info)
        with self.open_streams.track(relay):
            return await self._relay(request, relay, upstream, info, turn)

    async def _relay(
        self, request: web.Request, relay: StreamLoop, upstream: aiohttp.ClientResponse, info: dict, turn=None
    ) -> web.StreamResponse:
        try:
            await relay.prime()
            if "_owned_id" in info:
                await responses_state.remember_passthrough(self, request, relay.primed)
        except BaseException:
            upstream.close()
            raise
        if "_pooled" in info and relay.observer.outcome is Outcome.UPSTREAM_ERROR:
            # The stream opened with an error event (Anthropic's overloaded_error): nothing went
            # to the client yet, so a pooled route may still try another key or provider.
            upstream.close()
            raise E.UpstreamError(f"provider {relay.provider_name!r} opened its stream with an error event", status=503)
        if "_response_id" in info:  # a sticky pool notes the conversation's new response id
            info["_response_id"] = pools.response_id(relay.primed)
        response = web.StreamResponse(status=200)
        if relay.primed:
            # aiohttp sends a stream's headers on their own at prepare(); the first event is
            # ready, so they go out with it in one send, one packet for the client to wake up
            # to (a private aiohttp attribute: were it renamed, they would go alone, as before).
            response._send_headers_immediately = False
        response.headers["Content-Type"] = SSE_CONTENT_TYPE
        response.headers["Cache-Control"] = "no-cache"
        response.headers.update(E.preserved_headers(upstream.headers))
        requestid.stamp(response.headers, info["request_id"], self.engine.wire.request_id_header(info.get("client_protocol")),
                    info.get("upstream_request_id"))
        response.headers.update(info.get("_headers") or {})
        info["status"] = 200
        info["outcome"] = Outcome.OPEN.value
        retry.commit(info)  # from here on no retry, fallback or deadline cut: the client has bytes
        try:
            await response.prepare(request)
        except BaseException:
            upstream.close()
            raise
        info["ttfb_ms"] = round((time.monotonic() - info["_started"]) * 1000, 1)
        client: Any = response
        cap = request.get(CAPTURE_KEY)
        if cap is not None and cap.wants("outbound_response"):
            cap.start("outbound_response", capture.status_line(200, response.reason), response.headers.items())
            client = capture.TeeClient(response, cap)
        if turn is not None:
            client = turn.tee(client)  # the record is written before the terminal event
        info["outcome"] = Outcome.CLIENT_DISCONNECTED.value  # unless run() finishes
        try:
            info["outcome"] = (await relay.run(client)).value
        finally:
            # Both observers report the IR's canonical usage and stop, read by the provider's stream.decode rules.
            observer = relay.observer
            info.update(usage_fields(observer.usage))
            info["_stop"] = observer.stop  # for tracing
            if observer.translation_failed:
                info["translation_error"] = "stream"
            if observer.error_rule:
                info["rule"] = observer.error_rule
        slot = info.get("_stream_slot")
        if slot is not None:  # free before the end reaches the client: an agent's next turn must find it free
            await slot.release()
        if info["outcome"] != Outcome.CLIENT_DISCONNECTED:
            try:
                await response.write_eof()
            except (ConnectionResetError, aiohttp.ClientConnectionResetError):
                info["outcome"] = Outcome.CLIENT_DISCONNECTED.value
        return response

    async def send(
        self, request: web.Request, provider: ProviderConfig, body: bytes, stream: bool, info: dict,
        target: Target,
    ) -> aiohttp.ClientResponse:
        """Send to the provider; note its request id; capture both sides when asked."""
        notes = info.setdefault("_traces", [])
        notes.extend(n for n in self.engine.wire.header_notes(provider.protocol, provider, request.headers) if n not in notes)
        cap = request.get(CAPTURE_KEY)
        if cap is not None:
            headers = provider_headers(self.engine.wire, provider, request.headers, stream)
            if "key" in info:
                headers["x-proxai-served-by"] = info["key"]  # the pool key's fingerprint; not sent upstream
            cap.whole("provider_request", f"POST {upstream_url(provider, target.path, target.query)} HTTP/1.1", headers.items(), body)
        trace_headers = self.tracing.upstream_start(info, provider.name, provider.protocol, info.get("upstream_model") or "")
        upstream = await self.transport.send(self.engine.wire, provider, body, request.headers, stream, trace_headers,
                                             path=target.path, query=target.query)
        info["upstream_request_id"] = requestid.upstream_id(upstream.headers, self.engine.wire.request_id_header(provider.protocol))
        if cap is not None and cap.wants("upstream_response"):
            cap.start("upstream_response", capture.status_line(upstream.status, upstream.reason), upstream.headers.items())
            return capture.TeeUpstream(upstream, cap)  # type: ignore[return-value]
        return upstream

    async def raise_for_status(self, upstream: aiohttp.ClientResponse, provider: ProviderConfig) -> None:
        if 200 <= upstream.status < 300:
            return
        data = await read_body(upstream, provider, limit=64 * 1024)
        raise E.upstream_error(provider.protocol, upstream.status, data, upstream.headers, self.engine)

    # --- translation -------------------------------------------------------------------

    def translation_context(self, request: web.Request, protocol: str, match: RouteMatch, body: dict) -> engine.Context:
        """The engine's view of one translated request: the provider's options and the
        route's model capabilities (generation and token counting share it)."""
        provider = match.provider
        return engine.Context(
            client_protocol=protocol,
            provider_protocol=provider.protocol,
            provider_name=provider.name,
            upstream_model=match.upstream_model,
            response_model=response_model.answer_model(match, body.get("model")),
            client_body=body,
            continuation_enabled=self.config.continuation_enabled,
            continuation_secret=self.config.continuation_secret,
            max_tokens_default=provider.max_tokens_default,
            drop_sampling=provider.drop_sampling,
            thinking_mode=provider.thinking_mode,
            max_tokens_field=provider.max_tokens_field,
            **caching_context(provider, request.headers, self.config.continuation_secret),
            **model_capabilities(match),
        )

    async def translate(
        self, request: web.Request, protocol: str, match: RouteMatch, body: dict, stream: bool, info: dict, turn=None
    ) -> web.StreamResponse:
        provider = match.provider
        ctx = self.translation_context(request, protocol, match, body)
        info["_traces"] = ctx.traces
        try:
            with self.tracing.span("translate request", info):
                out_body, ir = server_tools.prepare(self, ctx, body)
        except E.TranslationError as exc:
            info["translation_error"] = "request"
            info["rule"] = exc.rule
            raise
        except Exception:
            info["translation_error"] = "request"
            raise
        if ctx.cache_breakpoints:
            info["cache_breakpoints"] = len(ctx.cache_breakpoints)
        if ctx.dropped_tools:
            info.setdefault("_headers", {})[DROPPED_TOOLS_HEADER] = ", ".join(dict.fromkeys(ctx.dropped_tools))
        if ctx.compaction is not None:  # the history is summarised first (compact_20260112, docs/context-management.md)
            answer = await compaction.summarise(self, request, match, ctx, ir, info)
            if ctx.compaction["pause"]:
                return await compaction.paused(self, request, ctx, answer, stream, info, turn)
            ir, out_body = compaction.continued(self.engine, ctx, ir)
        if server_tools.active(ctx):  # the proxy answers a tool the provider's model may call (web search, tool search)
            return await server_tools.serve(self, request, match, ctx, ir, out_body, stream, info, turn)
        target = self.engine.wire.target(provider.protocol, "generate", match.upstream_model, stream)
        upstream = await self.send(request, provider, dump_json(out_body), stream, info, target)
        del out_body, ir  # sent: this frame lives as long as the stream, and a retry translates again
        try:
            await self.raise_for_status(upstream, provider)
            if not stream:
                if _is_event_stream(upstream):
                    raise E.UpstreamProtocolError(f"provider {provider.name!r} answered a non-streaming request with a stream")
                data = await read_body(upstream, provider, cap=self.config.server.max_upstream_body_bytes)
                try:
                    upstream_body = orjson.loads(data)
                except orjson.JSONDecodeError:
                    raise E.UpstreamProtocolError(f"provider {provider.name!r} answered with a body that is not JSON") from None
                # Usage, stop and model by the provider protocol's summary rules: the same
                # templates its response.decode reads usage with.
                summary = self.engine.summary(provider.protocol, upstream_body)
                info.update(usage_fields(summary.get("usage")))
                self.tracing.upstream_done(info, provider.protocol, summary)
                try:
                    with self.tracing.span("translate response", info):
                        client_body = self.engine.translate_response(ctx, upstream_body)
                except E.TranslationError as exc:
                    info["translation_error"] = "response"
                    info["rule"] = exc.rule
                    raise
                except Exception:
                    info["translation_error"] = "response"
                    raise
                if turn is not None:
                    client_body = await turn.finish_body(client_body)  # stored before it goes out
                return json_response(200, dump_json(client_body), upstream.headers, info, self.engine.wire)
            if not _is_event_stream(upstream):
                raise E.UpstreamProtocolError(f"provider {provider.name!r} did not answer with an event stream")
        except BaseException:
            upstream.close()
            raise
        relay = StreamLoop(
            upstream,
            TranslatedStream(self.engine.open_stream(ctx)),
            idle_timeout=provider.read_idle_timeout_secs,
            tool_call_timeout=self.config.tool_call_timeout_secs,
            provider_name=provider.name,
            max_event_bytes=self.config.server.max_sse_event_bytes,
            # SSE comments only to clients that accept them (the descriptor's stream.comments)
            heartbeat=self.config.server.stream_heartbeat_secs if self.engine.wire.comments_allowed(protocol) else 0,
            idle_guarded=True,
        )
        return await self._stream(request, relay, upstream, info, turn)

    async def healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "mode": "demo" if self.demo else "config", "pid": os.getpid()})

    async def readyz(self, request: web.Request) -> web.Response:
        ready, checks = await self.readiness.report()
        body = {"status": "ready" if ready else "not_ready", "checks": checks, "generation": self.live.number}
        reloader = request.app.get(reload.RELOADER_KEY)
        if reloader is not None and reloader.last_error:
            body["last_reload_error"] = reload.short_reason(reloader.last_error)  # the old generation still serves
        return web.json_response(body, status=200 if ready else 503)

    async def metrics_endpoint(self, request: web.Request) -> web.Response:
        settings = self.config.server.metrics
        if settings.loopback_only and not _is_loopback(request.remote):
            raise E.NotFound(f"no endpoint at {request.path}")
        if settings.require_auth:
            self.authorize(request)
        body, content_type = self.metrics.render()
        response = web.Response(body=body)
        response.headers["Content-Type"] = content_type
        return response


# --- helpers ---------------------------------------------------------------------------


def _is_event_stream(resp: aiohttp.ClientResponse) -> bool:
    return resp.headers.get("Content-Type", "").lower().startswith("text/event-stream")


def model_capabilities(match: RouteMatch) -> dict[str, Any]:
    """What the model behind a route can take: the provider's settings, each overridden
    by the route's own when it sets one."""
    provider, route = match.provider, match.config
    out = {}
    for key in ("hosted_tools", "tool_search", "reasoning", "max_output_tokens", "mid_conversation_system"):
        value = getattr(route, key, None) if route is not None else None
        out[key] = value if value is not None else getattr(provider, key)
    return out


def _refuse_foreign_pages(request: web.Request, proxy: Proxy) -> None:
    # The inspector answers a foreign Host with its own 404, which does not say it is there.
    refused = origin.refusal(request.headers, request.path, proxy.config.server,
                             check_host=not request.path.startswith(inspector.PREFIX))
    if refused is not None:
        raise refused


@web.middleware
async def _middleware(request: web.Request, handler) -> web.StreamResponse:
    started = time.monotonic()
    request_id = requestid.from_client(request.headers)
    token = requestid.current.set(request_id)
    proxy = request.app[PROXY_KEY]
    protocol = proxy.paths.protocol_for(request.path, request.headers)
    info: dict[str, Any] = {"request_id": request_id, "method": request.method, "path": request.path,
                            "_started": started}
    if paths.canonical(request.path) in proxy.paths.generate:
        info["client_protocol"] = protocol
    request[INFO_KEY] = info
    pinned = reload.pin(proxy)  # the request and its stream finish on the generation they start on
    rules = proxy.engine  # the error bodies are its protocols' `errors:` rules
    response: web.StreamResponse | None = None
    try:
        _refuse_foreign_pages(request, proxy)
        response = await handler(request)
        return response
    except E.ProxyError as err:
        response = _error_response(protocol, err, info, rules, proxy.engine.wire)
        return response
    except web.HTTPException as exc:
        await _capture_unrouted(request)
        if exc.status == 404:
            err: E.ProxyError = E.NotFound(
                f"no endpoint at {request.path}; serving {', '.join('POST ' + p for p in proxy.paths.generate)}"
                f", POST {', POST '.join(proxy.paths.count_tokens)}, GET {paths.MODELS}")
        elif exc.status == 405:
            allowed = ", ".join(sorted(getattr(exc, "allowed_methods", None) or {"POST"}))
            err = E.MethodNotAllowed(f"method {request.method} is not allowed on {request.path}; use {allowed}")
        elif exc.status == 413:
            err = E.RequestTooLarge("request body is too large")
        else:
            err = E.ProxyError(exc.reason or "error", status=exc.status)
        response = _error_response(protocol, err, info, rules, proxy.engine.wire)
        if exc.status == 405:
            response.headers["Allow"] = ", ".join(sorted(getattr(exc, "allowed_methods", None) or {"POST"}))
        return response
    except Exception as exc:
        # No message: it might quote request content. Type and location suffice to find the bug.
        tb = "".join(traceback.format_tb(exc.__traceback__))
        log.error("internal error %s in request %s\n%s", type(exc).__name__, request_id, tb)
        response = _error_response(protocol, E.InternalError("internal error in the proxy"), info, rules, proxy.engine.wire)
        info["error"] = type(exc).__name__
        return response
    finally:
        elapsed = round((time.monotonic() - started) * 1000, 1)
        if response is not None and "ttfb_ms" not in info:
            info["ttfb_ms"] = elapsed  # a whole response goes out as soon as the handler returns it
        cap = request.get(CAPTURE_KEY)
        if cap is not None:
            if isinstance(response, web.Response) and isinstance(response.body, (bytes, bytearray)):
                cap.whole("outbound_response", capture.status_line(response.status, response.reason),
                          response.headers.items(), bytes(response.body))
            cap.close()
        # a Responses WebSocket logs each of its turns (responses_ws), not the socket
        if request.path not in _UNLOGGED and not request.path.startswith(inspector.PREFIX) and "_socket" not in info:
            if response is None:  # cancelled: the client went away
                info.setdefault("outcome", Outcome.CLIENT_DISCONNECTED.value)
                info.setdefault("status", 499)
            elif "status" not in info:
                info["status"] = response.status
            info["duration_ms"] = elapsed
            if cap is not None:
                cap.summary(info)
            notes = info.get("_traces")
            if notes:
                # One line per note at DEBUG; the INFO summary carries only their count.
                info["translation_notes"] = len(notes)
                if log.isEnabledFor(logging.DEBUG):
                    for note in notes:
                        log.debug("translation: %s", note)
            add_earlier_usage(info)
            log_request(**info)
            client = info.get("_client")
            if client is not None and client.tokens_per_minute is not None:
                tokens = (info.get("input_tokens") or 0) + (info.get("output_tokens") or 0)
                request.app[PROXY_KEY].limits.spend_later(client, tokens)
            if paths.canonical(request.path) in proxy.paths.generate or proxy.engine.wire.model_path(request.path):
                request.app[PROXY_KEY].metrics.observe(info)
                if request.app[PROXY_KEY].inspector is not None:
                    request.app[PROXY_KEY].inspector.finish(info)
        reload.unpin(pinned)
        requestid.current.reset(token)


_UNLOGGED = frozenset({"/healthz", "/readyz", "/metrics"})


async def _capture_unrouted(request: web.Request) -> None:
    """Requests that never reach a handler (unknown path, wrong method) are captured too."""
    recorder = request.app[PROXY_KEY].recorder
    if recorder is None or request.get(CAPTURE_KEY) is not None or request.path in _UNLOGGED:
        return
    cap = request[CAPTURE_KEY] = recorder.open(request[INFO_KEY]["request_id"])
    try:
        body = await request.read()
    except web.HTTPException:  # larger than the body limit: the head alone
        body = b""
    version = f"HTTP/{request.version.major}.{request.version.minor}"
    cap.whole("inbound_request", f"{request.method} {request.path_qs} {version}", request.headers.items(), body)


def _error_response(protocol: str, err: E.ProxyError, info: dict, rules, wire: engine.wire.Wire) -> web.Response:
    status, headers, body = E.render_http(protocol, err, rules)
    response = web.Response(status=status, body=body)
    for name, value in headers.items():
        response.headers[name] = value
    requestid.stamp(response.headers, info["request_id"], wire.request_id_header(info.get("client_protocol")),
                    info.get("upstream_request_id"))
    info["status"] = status
    info["error"] = err.kind
    return response


def build_app(
    config: Config | None = None, *, server: ServerConfig | None = None, capture_phases: dict[str, bool] | None = None
) -> web.Application:
    """The proxy application. With no config: demo mode, built-in mock upstreams
    (`server` and `capture_phases` then give those settings)."""
    demo = config is None
    if config is None:
        config = demo_config("http://127.0.0.1:0", server, capture_phases)
    proxy = Proxy(config, demo=demo)
    app = web.Application(middlewares=[_middleware], client_max_size=config.server.max_request_body_bytes)
    app[PROXY_KEY] = proxy
    for path in proxy.paths.generate:
        app.router.add_post(path, proxy.handle)
        if paths.unprefixed(path) is not None:
            app.router.add_post(paths.unprefixed(path), proxy.handle)
    count_tokens.register(app, proxy, INFO_KEY)
    gemini_client.register(app, proxy, INFO_KEY, CAPTURE_KEY)
    models_endpoint.register(app, proxy, INFO_KEY)
    responses_state.add_routes(app, proxy, first=background.answer)
    conversations.add_routes(app, proxy)
    background.add_routes(app, proxy)
    responses_ws.add_routes(app, proxy)
    responses_compact.add_routes(app, proxy)
    app.router.add_get("/healthz", proxy.healthz)
    app.router.add_get("/readyz", proxy.readyz)
    if config.server.metrics.enabled:
        app.router.add_get("/metrics", proxy.metrics_endpoint)
    if proxy.inspector is not None:
        proxy.inspector.add_routes(app, proxy)
    app.on_startup.append(proxy.on_startup)
    app.on_shutdown.append(shutdown.drain)
    app.on_cleanup.append(proxy.on_cleanup)
    return app


def make_runner(app: web.Application) -> web.AppRunner:
    # handler_cancellation: a client that disconnects cancels its handler, and so the upstream request.
    # The drain (shutdown.drain) has already run when aiohttp's own shutdown wait starts: keep that short.
    proxy = app[PROXY_KEY]
    return serving.Runner(app, limits=proxy.config.server, protocol_for_path=protocol_for_path(app),
                          rules=lambda: proxy.engine, handle_signals=False, access_log=None,
                          handler_cancellation=True, shutdown_timeout=shutdown.AFTER_DRAIN_SECS)


def demo_config(mock_url: str, server: ServerConfig | None = None, capture_phases: dict[str, bool] | None = None) -> Config:
    """Demo mode: one mock provider per protocol. The model prefix picks the provider,
    so `anthropic/x` through /v1/chat/completions exercises a translation."""
    providers = {
        "demo-chat": ProviderConfig("demo-chat", CHAT, mock_url + "/v1", "demo-key", models=("demo", "chat/demo")),
        "demo-responses": ProviderConfig("demo-responses", RESPONSES, mock_url + "/v1", "demo-key",
                                         models=("demo", "responses/demo")),
        "demo-anthropic": ProviderConfig("demo-anthropic", ANTHROPIC, mock_url, "demo-key",
                                         models=("demo", "anthropic/demo")),
        "demo-gemini": ProviderConfig("demo-gemini", GEMINI, mock_url, "demo-key", models=("gemini/demo",)),
        "demo-interactions": ProviderConfig("demo-interactions", INTERACTIONS, mock_url, "demo-key",
                                            models=("interactions/demo",)),
    }
    routes = tuple(
        RouteConfig(name=f"demo-{prefix}", model_pattern=f"^{prefix}/(.+)$", provider=name, match_kind="regex", upstream_model="$1")
        for prefix, name in (("chat", "demo-chat"), ("responses", "demo-responses"), ("anthropic", "demo-anthropic"),
                             ("gemini", "demo-gemini"), ("interactions", "demo-interactions"))
    )
    return Config(
        providers=providers,
        server=server or ServerConfig(),
        # Gemini clients: `chat/...`, `responses/...`, `anthropic/...` pick a provider; other names go to Chat.
        # Interactions clients: other names go to the Interactions mock (the protocol's own upstream).
        default_providers={CHAT: "demo-chat", RESPONSES: "demo-responses", ANTHROPIC: "demo-anthropic", GEMINI: "demo-chat",
                           INTERACTIONS: "demo-interactions"},
        routes=routes,
        tool_call_timeout_secs=120.0,
        state=StateConfig(backend="memory"),
        **({"capture": dict(capture_phases)} if capture_phases else {}),
    )


def with_server(config: Config, host: str | None = None, port: int | None = None) -> Config:
    server = config.server
    if host is not None:
        server = dataclasses.replace(server, host=host)
    if port is not None:
        server = dataclasses.replace(server, port=port)
    return dataclasses.replace(config, server=server)
