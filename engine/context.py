"""Per-request translation context: everything a rule may read besides the payload."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Anthropic requires max_tokens; Chat and Responses clients may omit it.
DEFAULT_MAX_TOKENS = 4096


@dataclass
class Context:
    client_protocol: str
    provider_protocol: str
    provider_name: str = "default"
    upstream_model: str | None = None
    # The model name answers carry in place of the provider's (None: the provider's).
    response_model: str | None = None
    client_body: dict | None = None
    continuation_enabled: bool = True
    continuation_secret: str | None = None
    max_tokens_default: int | None = None
    drop_sampling: bool = False
    # Anthropic providers: how an OpenAI reasoning effort asks for thinking.
    # "adaptive" (thinking: adaptive + output_config.effort) or "budget" (thinking:
    # enabled with budget_tokens, for models without adaptive thinking).
    thinking_mode: str = "adaptive"
    # Chat providers: the output-limit field to send (older servers know only max_tokens).
    max_tokens_field: str = "max_completion_tokens"
    # Prompt caching policy of the provider (auto | passthrough | off; the server passes
    # the provider's, default auto), the client's explicit prompt_cache_key override,
    # and the key a derived prompt_cache_key is an HMAC under (engine/hooks/caching.py).
    prompt_caching: str = "off"
    prompt_cache_key: str | None = None
    cache_key_secret: bytes | None = None
    # A digest of the client's key: derived keys are per tenant (empty: no key presented).
    cache_key_tenant: bytes = b""
    # What the model behind the route can take (provider settings, route overrides).
    hosted_tools: str = "drop"            # drop | reject: hosted tools the provider cannot run
    reasoning: str = "forward"            # forward | drop: reasoning effort / thinking
    max_output_tokens: int | None = None  # the model's output-token ceiling; larger client limits are clamped
    # Anthropic providers: native | fold for system messages after the first turn (None: by model name).
    mid_conversation_system: str | None = None
    tool_search: str = "emulate"          # emulate | eager | reject: deferred tools and tool search
    # Tools the proxy runs itself, by the name the provider sees (engine/hooks/tool_search.py,
    # proxai/http/server_tools/): what each is and what it needs to run.
    server_tools: dict = field(default_factory=dict)
    # Tools sent under another name or form (namespaced, free-form as a function), by the
    # name the provider sees, so the calls that come back reach the client in its own form.
    tool_calls: dict = field(default_factory=dict)
    # Hosted tool types left out of the provider request (the client is told in a header).
    dropped_tools: list = field(default_factory=list)
    # Wire names the client used for canonical fields (filled by request decoders) so a
    # rejection by the provider's encoder can name the client's own field.
    param_names: dict = field(default_factory=dict)
    # Non-fatal notes (dropped advisory fields, skipped foreign reasoning): no payload text.
    traces: list = field(default_factory=list)
    # Where the request encoder placed cache breakpoints (provider-request paths), for
    # the log line and `proxai translate`.
    cache_breakpoints: list = field(default_factory=list)
    # What a derived prompt_cache_key was derived from (session, prefix, header), never its value.
    cache_key_source: str | None = None

    _vars: dict | None = field(default=None, repr=False)
    # Anthropic's context management run by the proxy (engine/hooks/context_editing.py): the
    # answer's context_management report, and a compaction to run ({instructions, pause},
    # then the summary) before the provider is asked.
    context_management: dict | None = None
    compaction: dict | None = None

    def vars(self) -> dict[str, Any]:
        """The ``$ctx`` variable rules read (built once per request)."""
        if self._vars is None:
            self._vars = self._build_vars()
        return self._vars

    def _build_vars(self) -> dict[str, Any]:
        body = self.client_body or {}
        stream_options = body.get("stream_options") if isinstance(body, dict) else None
        return {
            "client_protocol": self.client_protocol,
            "provider_protocol": self.provider_protocol,
            "provider_name": self.provider_name,
            "upstream_model": self.upstream_model,
            "continuation_enabled": self.continuation_enabled,
            "max_tokens_default": self.max_tokens_default or DEFAULT_MAX_TOKENS,
            "drop_sampling": self.drop_sampling,
            "thinking_mode": self.thinking_mode,
            "max_tokens_field": self.max_tokens_field,
            "reasoning": self.reasoning,
            "include_usage": bool(isinstance(stream_options, dict) and stream_options.get("include_usage")),
            "client_body": body,
            "prompt_caching": self.prompt_caching,
        }

    def trace(self, message: str) -> None:
        self.traces.append(message)
