"""The config file: YAML, `${ENV}` expansion, schema validation, defaults.

Every problem is reported with its dotted path (`providers.ant.protocol`), all
problems at once, as a ConfigError; from a file, each also with the line and
column it is at (`proxai.yaml:12:5: providers.ant.protocol: ...`).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import hashlib
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import jsonschema
import yaml

from proxai.http.errors import ConfigError
from proxai import protocols
from proxai.routing.route_patterns import compile_route
from engine.errors import Problem
from engine import yamlsrc
from engine.ruleset import SCHEMAS

SCHEMA_FILE = SCHEMAS / "config.schema.json"

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 18080


@dataclass(frozen=True)
class MetricsConfig:
    enabled: bool = True
    require_auth: bool = False  # needs server.api_keys
    loopback_only: bool = False


@dataclass(frozen=True)
class InspectorConfig:
    enabled: bool = False
    loopback_only: bool = True  # False needs server.api_keys
    max_requests: int = 200  # requests kept in memory for the page


@dataclass(frozen=True)
class ClientKey:
    """One entry of `server.api_keys`: the key a client presents, the name logs, metrics,
    captures and the inspector show for it (never the key), and its limits (None: none)."""

    key: str = field(repr=False)  # a repr in a log or traceback never shows it
    name: str = ""
    requests_per_minute: int | None = None
    tokens_per_minute: int | None = None
    concurrent_streams: int | None = None

    @property
    def limited(self) -> bool:
        return any(v is not None for v in (self.requests_per_minute, self.tokens_per_minute, self.concurrent_streams))


def key_fingerprint(key: str) -> str:
    """A short, stable name for a key in logs, metrics and captures (never the key)."""
    return "k-" + hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _client_key(entry: Any) -> ClientKey:
    if isinstance(entry, str):  # a plain key is named by its fingerprint
        return ClientKey(entry, key_fingerprint(entry))
    limits = entry.get("limits") or {}
    return ClientKey(entry["key"], entry["name"], limits.get("requests_per_minute"), limits.get("tokens_per_minute"),
                     limits.get("concurrent_streams"))


@dataclass(frozen=True)
class ServerConfig:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    max_request_body_bytes: int = 52428800
    max_concurrent_requests: int = 64
    api_keys: tuple[str, ...] = ()  # the keys of `clients`, in order
    clients: tuple[ClientKey, ...] = ()
    # Without api_keys: web pages and Host names let in besides this machine's (proxai/http/origin.py).
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    inspector: InspectorConfig = field(default_factory=InspectorConfig)
    # Connection and size limits (docs/failures.md "Failure behaviour" and docs/security.md).
    header_timeout_secs: float = 10.0
    keepalive_timeout_secs: float = 75.0
    request_body_timeout_secs: float = 60.0
    max_connections: int = 1024
    max_upstream_body_bytes: int = 67108864
    max_sse_event_bytes: int = 16777216
    shutdown_timeout_secs: float = 30.0
    stream_heartbeat_secs: float = 15.0


LIMIT_KEYS = (
    "header_timeout_secs", "keepalive_timeout_secs", "request_body_timeout_secs", "max_connections",
    "max_upstream_body_bytes", "max_sse_event_bytes", "shutdown_timeout_secs", "stream_heartbeat_secs",
)


@dataclass(frozen=True)
class TracingConfig:
    enabled: bool = False
    service_name: str = "proxai"
    exporter: str = "otlp"  # otlp | console | none (spans go to the TracerProvider already set)
    endpoint: str | None = None  # OTLP/HTTP traces URL; default: the OTEL_EXPORTER_OTLP_* variables


@dataclass(frozen=True)
class ProviderConfig:
    name: str
    protocol: str
    base_url: str
    api_key: str
    models: tuple[str, ...] = ()  # listed by GET /v1/models when routing sends them here
    read_idle_timeout_secs: float = 120.0
    max_tokens_default: int | None = None
    anthropic_version: str = "2023-06-01"
    auth: str = "x-api-key"
    drop_sampling: bool = False
    thinking_mode: str = "adaptive"
    max_tokens_field: str = "max_completion_tokens"
    # Cache hints the proxy adds on translated requests: auto | passthrough | off (docs/prompt-caching.md "Prompt caching").
    prompt_caching: str = "auto"
    # What the provider's models can take (a route may override each).
    hosted_tools: str = "drop"
    # Deferred tools (defer_loading) and tool search the provider cannot run: emulate | eager | reject.
    tool_search: str = "emulate"
    reasoning: str = "forward"
    max_output_tokens: int | None = None
    # Anthropic providers: a system message after the first turn sent in place (native) or
    # folded into the top-level system (fold); None: by the model's name (a route may override).
    mid_conversation_system: str | None = None
    # Anthropic providers: which anthropic-beta values of the client go on ({allow: [...], deny: [...]}).
    betas: dict | None = None
    # A key pool (docs/routing.md "Resilient routing"): api_keys in place of api_key; api_key is then the first.
    api_keys: tuple[str, ...] = ()
    key_weights: tuple[float, ...] = ()  # one per api_keys entry (weighted strategy)
    strategy: str = "round_robin"  # round_robin | weighted | least_in_flight | sticky

    def __repr__(self) -> str:  # never show the key
        return f"ProviderConfig(name={self.name!r}, protocol={self.protocol!r}, base_url={self.base_url!r})"


@dataclass(frozen=True)
class RouteConfig:
    name: str
    model_pattern: str
    provider: str
    match_kind: str = "auto"
    upstream_model: str | None = None
    request_protocol: str | None = None
    # Model capability overrides of the provider's settings (None: the provider's).
    hosted_tools: str | None = None
    tool_search: str | None = None
    reasoning: str | None = None
    max_output_tokens: int | None = None
    mid_conversation_system: str | None = None
    fallbacks: tuple["Fallback", ...] = ()  # tried in order after `provider`
    # Several deployments balanced by `strategy` (docs/routing.md "Resilient routing"); `provider` is then
    # the first of them. Empty: the route has the one `provider`.
    providers: tuple["RouteProvider", ...] = ()
    strategy: str = "round_robin"  # round_robin | weighted | least_in_flight | sticky
    # Which model name answers carry when the route renames the model: the client's (default)
    # or the upstream's (proxai/http/response_model.py).
    response_model: str = "client"
    # The model that writes compaction summaries for this route's models (routed like a
    # client's model name; None: the routed model itself). proxai/endpoints/compaction.py
    compaction_model: str | None = None


@dataclass(frozen=True)
class Fallback:
    provider: str
    upstream_model: str | None = None  # None: the route's upstream model (or the client's model)


@dataclass(frozen=True)
class RouteProvider:
    """One of a route's balanced `providers`."""

    provider: str
    weight: float = 1.0
    upstream_model: str | None = None  # None: the route's upstream model (or the client's model)


@dataclass(frozen=True)
class BreakerConfig:
    failures: int = 5  # 5xx/timeouts within window_secs that open a deployment's breaker
    window_secs: float = 30.0
    open_secs: float = 30.0  # then one half-open probe


@dataclass(frozen=True)
class ResilienceConfig:
    """Retries, cooldowns and breakers (docs/routing.md "Resilient routing")."""

    max_attempts: int = 3  # tries of one request, the first included
    # Total time of a request before its commit point: no attempt starts later, and a running one
    # is cut (a timeout for the client). A stream that has sent its first event is not cut.
    deadline_secs: float = 60.0
    retry_budget_ratio: float = 0.2  # retries allowed per request served (over ~10 s) ...
    retry_budget_min_per_sec: float = 5.0  # ... plus this floor, so a quiet proxy can still retry
    cooldown_secs: float = 5.0  # a 429 without Retry-After rests the key this long, doubling per repeat
    max_cooldown_secs: float = 600.0
    disable_secs: float = 3600.0  # a key the provider refused (401/403) is left out this long
    sync_secs: float = 0.5  # how stale the shared view of cooldowns and breakers may be
    breaker: BreakerConfig = field(default_factory=BreakerConfig)


@dataclass(frozen=True)
class StateConfig:
    """Server-side Responses state (docs/responses-state.md "Responses state")."""

    backend: str = "sqlite"  # sqlite | memory | redis | none
    url: str | None = None  # sqlite: a file path (default $PROXAI_HOME/state.db); redis: redis://host:port/db
    ttl_secs: float = 30 * 24 * 3600  # OpenAI keeps stored responses 30 days
    max_chain_depth: int = 1000
    max_record_bytes: int = 16 * 1024 * 1024
    required_for_readiness: bool = False  # true: /readyz is 503 while the store is down


@dataclass(frozen=True)
class Config:
    providers: dict[str, ProviderConfig]
    server: ServerConfig = field(default_factory=ServerConfig)
    default_providers: dict[str, str] = field(default_factory=dict)
    routes: tuple[RouteConfig, ...] = ()
    tool_call_timeout_secs: float = 120.0
    continuation_enabled: bool = True
    continuation_secret: str | None = None
    rules_dir: str | None = None
    capture: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(CAPTURE_PHASES, False))
    log_level: str = "info"
    log_format: str = "human"
    state: StateConfig = field(default_factory=StateConfig)
    tracing: TracingConfig = field(default_factory=TracingConfig)
    resilience: ResilienceConfig = field(default_factory=ResilienceConfig)
    web_search: dict | None = None  # the search backend (proxai/web_search); None: web search is left out
    source: str | None = None  # the file it came from; None in demo mode


CAPTURE_PHASES = ("inbound_request", "provider_request", "upstream_response", "outbound_response")


@functools.lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    import json

    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


def load_file(path: str | os.PathLike[str], env: Mapping[str, str] | None = None) -> Config:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([("", f"cannot read config file: {exc.strerror or exc}")], str(p)) from None
    marks: dict[tuple[Any, ...], tuple[int, int]] = {}
    try:
        doc = yamlsrc.safe_load_strict(text, marks)  # duplicate keys and alias bombs are errors
    except yaml.YAMLError as exc:
        raise ConfigError([_syntax_problem(exc, text)], str(p)) from None
    try:
        cfg = load_dict({} if doc is None else doc, env, base=p.parent)
    except ConfigError as exc:
        raise _placed(exc, {dotted(k): v for k, v in marks.items()}, str(p)) from None
    return dataclasses.replace(cfg, source=str(p), rules_dir=_rules_dir(cfg.rules_dir, p.parent))


def _rules_dir(rules_dir: str | None, base: Path | None) -> str | None:
    if rules_dir and base is not None and not Path(rules_dir).is_absolute():
        return str(base / rules_dir)  # relative to the config file, not the working directory
    return rules_dir


def load_dict(doc: Any, env: Mapping[str, str] | None = None, base: Path | None = None) -> Config:
    """Validate a parsed config document and build a Config (raises ConfigError). `base`:
    the config file's directory (a relative rules_dir, whose protocols count, is below it)."""
    env = os.environ if env is None else env
    problems: list[tuple[str, str]] = []
    if not isinstance(doc, dict):
        raise ConfigError([("", "the config file must be a mapping at the top level")])
    substituted: set[tuple[Any, ...]] = set()
    doc = _expand(doc, (), env, problems, substituted)
    if problems:
        raise ConfigError(problems)
    _coerce_env_scalars(doc, substituted)
    validator = jsonschema.Draft202012Validator(schema())
    for err in sorted(validator.iter_errors(doc), key=lambda e: [str(x) for x in e.absolute_path]):
        problems.extend(_describe(err))
    references: list[tuple[str, str]] = []
    _check_references(doc, references)
    wire = protocols.wire(_rules_dir(doc.get("rules_dir") if isinstance(doc.get("rules_dir"), str) else None, base))
    _check_protocols(doc, wire, problems)
    for name, p in (doc.get("providers") or {}).items():
        if not isinstance(p, dict):
            continue  # the schema says so
        if "api_key" not in p and "api_keys" not in p:
            problems.append((f"providers.{name}.api_key", "required key is missing"))
        elif "api_key" in p and "api_keys" in p:
            problems.append((f"providers.{name}.api_keys", "give api_key or api_keys, not both"))
    for i, r in enumerate((doc.get("routing") or {}).get("routes") or ()):
        base = f"routing.routes[{i}]"
        if not isinstance(r, dict):
            continue
        if "provider" not in r and "providers" not in r:
            problems.append((f"{base}.provider", "required key is missing"))
        elif "provider" in r and "providers" in r:
            problems.append((f"{base}.providers", "give provider or providers, not both"))
        elif "providers" in r and not r["providers"]:
            problems.append((f"{base}.providers", "an empty list: name at least one provider"))
        if "strategy" in r and "providers" not in r:
            problems.append((f"{base}.strategy", "only with providers (a provider's keys follow providers.<name>.strategy)"))
    if problems:
        raise ConfigError(_dedupe(problems + references))
    cfg = _build(doc)
    problems = references
    _check_semantics(cfg, wire, problems)
    if problems:
        raise ConfigError(problems)
    return cfg


# --- ${ENV} expansion ---------------------------------------------------------

# Only identifier names: `${1}` stays literal for regex routes' upstream_model.
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def _expand(node: Any, path: tuple[Any, ...], env: Mapping[str, str], problems: list, substituted: set) -> Any:
    if isinstance(node, dict):
        return {k: _expand(v, path + (k,), env, problems, substituted) for k, v in node.items()}
    if isinstance(node, list):
        return [_expand(v, path + (i,), env, problems, substituted) for i, v in enumerate(node)]
    if isinstance(node, str) and "${" in node and _ENV_REF.search(node):

        def sub(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in env:
                problems.append((dotted(path), f"environment variable {name} is not set"))
                return ""
            return env[name]

        whole = _ENV_REF.fullmatch(node) is not None
        value = _ENV_REF.sub(sub, node)
        if whole:
            substituted.add(path)
        return value
    return node


def _coerce_env_scalars(doc: dict, paths: set[tuple[Any, ...]]) -> None:
    """`port: ${PORT}` gives a string; convert it where the schema wants a number or boolean."""
    for path in paths:
        wanted = _schema_type_at(path)
        parent: Any = doc
        for key in path[:-1]:
            parent = parent[key]
        value = parent[path[-1]]
        if wanted == "integer" and re.fullmatch(r"-?\d+", value.strip()):
            parent[path[-1]] = int(value)
        elif wanted == "number" and re.fullmatch(r"-?\d+(\.\d*)?([eE][-+]?\d+)?", value.strip()):
            parent[path[-1]] = float(value) if any(c in value for c in ".eE") else int(value)
        elif wanted == "boolean" and value.strip().lower() in ("true", "false"):
            parent[path[-1]] = value.strip().lower() == "true"


def _schema_type_at(path: tuple[Any, ...]) -> str | None:
    root = schema()
    node: Any = root
    for key in path:
        if isinstance(node, dict) and "$ref" in node:
            node = root["$defs"][node["$ref"].rsplit("/", 1)[-1]]
        if not isinstance(node, dict):
            return None
        if isinstance(key, int):
            node = node.get("items")
        elif key in node.get("properties", {}):
            node = node["properties"][key]
        else:
            node = node.get("additionalProperties")
    if isinstance(node, dict) and "$ref" in node:
        node = root["$defs"][node["$ref"].rsplit("/", 1)[-1]]
    return node.get("type") if isinstance(node, dict) else None


# --- where a problem is ------------------------------------------------------------


def _placed(exc: ConfigError, marks: dict[str, tuple[int, int]], file: str) -> ConfigError:
    return ConfigError([_place(problem, marks) for problem in exc.problems], file)


def _place(problem: tuple[str, str], marks: dict[str, tuple[int, int]]) -> Problem:
    path, message = problem
    line, column = _mark_of(path, marks) or (None, None)
    return Problem(path, message, line=line, column=column, hint=getattr(problem, "hint", None))


def _mark_of(path: str, marks: dict[str, tuple[int, int]]) -> tuple[int, int] | None:
    """Where `path` is in the file, else its nearest ancestor that is (so a missing key points
    at the mapping that lacks it)."""
    if path in marks:
        return marks[path]
    # Matched on whole segments: a provider named `a.b` is one key, so no string splitting.
    best = ""
    for known in marks:
        if len(known) > len(best) and path.startswith(known) and path[len(known):len(known) + 1] in (".", "["):
            best = known
    return marks.get(best)


def _syntax_problem(exc: yaml.YAMLError, text: str) -> Problem:
    """A YAML syntax error, placed where the mistake is: an unclosed quote where it opened,
    not at the end of the file (or the next quote) where the parser gave up."""
    problem = getattr(exc, "problem", None) or "invalid YAML"
    mark, context = getattr(exc, "problem_mark", None), getattr(exc, "context", None) or ""
    opened = getattr(exc, "context_mark", None)
    gave_up = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "the end"
    if "quoted scalar" in context and opened is not None and re.search(r"end of stream|document", problem):
        return Problem("", f"unclosed quote (the parser gave up at {gave_up}: {problem})",
                       line=opened.line + 1, column=opened.column + 1)
    runaway = _runaway_quote(text, mark) if isinstance(exc, yaml.parser.ParserError) else None
    if runaway is not None:
        return Problem("", f"unclosed quote? the quoted scalar opened here runs to line {runaway.end_mark.line + 1} "
                       f"and takes in what looks like keys (the parser gave up at {gave_up}: {problem})",
                       line=runaway.start_mark.line + 1, column=runaway.start_mark.column + 1)
    if context and opened is not None:
        problem += f" ({context} at line {opened.line + 1}, column {opened.column + 1})"
    return Problem("", problem, line=mark.line + 1 if mark else None, column=mark.column + 1 if mark else None)


def _runaway_quote(text: str, mark: Any) -> Any:
    """The last quoted scalar before the parser's error that spans lines and holds `key: `:
    a quote left open that the next quote closed. A multi-line quoted value is rare in a
    config; one swallowing keys is almost surely the mistake."""
    if mark is None:
        return None
    found = None
    try:
        for token in yaml.scan(text, Loader=yaml.SafeLoader):
            if token.start_mark.index >= mark.index:
                break
            if (isinstance(token, yaml.ScalarToken) and token.style in ('"', "'")
                    and token.end_mark.line > token.start_mark.line and re.search(r"\w: ", token.value)):
                found = token
    except yaml.YAMLError:
        pass
    return found


# --- validation messages --------------------------------------------------------


def dotted(path: tuple[Any, ...] | list[Any]) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _describe(err: jsonschema.ValidationError) -> list[tuple[str, str]]:
    path = list(err.absolute_path)
    if err.validator == "additionalProperties" and isinstance(err.instance, dict):
        allowed = set(err.schema.get("properties", {}))
        extra = [k for k in err.instance if k not in allowed]
        return [Problem(dotted(path + [k]), "unknown key", hint=_did_you_mean(k, allowed)) for k in extra]
    if err.validator == "required":
        missing = re.findall(r"'([^']+)' is a required property", err.message)
        return [(dotted(path + [m]), "required key is missing") for m in missing] or [(dotted(path), err.message)]
    if err.validator == "enum":
        options = ", ".join(str(o) for o in err.validator_value)
        return [(dotted(path), f"must be one of: {options} (got {err.instance!r})")]
    if err.validator == "type":
        return [(dotted(path), f"must be of type {err.validator_value} (got {type(err.instance).__name__})")]
    if err.validator == "propertyNames":
        return [(dotted(path + [err.instance]), "invalid name (letters, digits, _ . - only)")]
    if err.validator == "pattern" and path and path[-1] == "base_url":
        return [(dotted(path), "must be an http:// or https:// URL")]
    if err.validator == "minProperties":
        return [(dotted(path), "must not be empty")]
    message = err.message
    # Never echo a secret value back into an error message.
    if path and path[-1] in ("api_key", "secret") or "api_keys" in path:
        message = f"invalid value ({err.validator})"
    return [(dotted(path), message)]


def _did_you_mean(name: Any, choices: Any) -> str | None:
    close = difflib.get_close_matches(str(name), sorted(choices), n=1)
    return f"did you mean {close[0]}?" if close else None


def _dedupe(problems: list[tuple[str, str]]) -> list[tuple[str, str]]:
    seen: set[tuple[str, str]] = set()
    out = []
    for p in problems:
        if p not in seen:
            seen.add(p)
            out.append(p)
    return out


# --- building -----------------------------------------------------------------------


def _build(doc: dict[str, Any]) -> Config:
    server = doc.get("server", {})
    providers = {name: _provider(name, p) for name, p in doc.get("providers", {}).items()}
    routing = doc.get("routing", {})
    routes = tuple(
        RouteConfig(
            name=r.get("name", f"routes[{i}]"),
            model_pattern=r["model_pattern"],
            provider=r.get("provider") or next((d.provider for d in _deployments(r)), ""),
            providers=_deployments(r),
            strategy=r.get("strategy", "round_robin"),
            match_kind=r.get("match_kind", "auto"),
            upstream_model=r.get("upstream_model"),
            request_protocol=r.get("request_protocol"),
            hosted_tools=r.get("hosted_tools"),
            tool_search=r.get("tool_search"),
            reasoning=r.get("reasoning"),
            max_output_tokens=r.get("max_output_tokens"),
            mid_conversation_system=r.get("mid_conversation_system"),
            response_model=r.get("response_model", "client"),
            compaction_model=r.get("compaction_model"),
            fallbacks=tuple(
                Fallback(f) if isinstance(f, str) else Fallback(f["provider"], f.get("upstream_model"))
                for f in r.get("fallbacks", ())
            ),
        )
        for i, r in enumerate(routing.get("routes", []))
    )
    capture = dict.fromkeys(CAPTURE_PHASES, False)
    capture.update(doc.get("capture", {}))
    clients = tuple(_client_key(entry) for entry in server.get("api_keys", ()))
    return Config(
        providers=providers,
        server=ServerConfig(
            host=server.get("host", DEFAULT_HOST),
            port=server.get("port", DEFAULT_PORT),
            max_request_body_bytes=server.get("max_request_body_bytes", 52428800),
            max_concurrent_requests=server.get("max_concurrent_requests", 64),
            api_keys=tuple(c.key for c in clients),
            clients=clients,
            allowed_origins=tuple(server.get("allowed_origins", ())),
            allowed_hosts=tuple(server.get("allowed_hosts", ())),
            metrics=MetricsConfig(**server.get("metrics", {})),
            inspector=InspectorConfig(**server.get("inspector", {})),
            **{key: server[key] for key in LIMIT_KEYS if key in server},
        ),
        default_providers=dict(routing.get("default_providers", {})),
        routes=routes,
        tool_call_timeout_secs=doc.get("tool_calls", {}).get("timeout_secs", 120.0),
        continuation_enabled=doc.get("continuation", {}).get("enabled", True),
        continuation_secret=doc.get("continuation", {}).get("secret"),
        rules_dir=doc.get("rules_dir"),
        capture=capture,
        log_level=doc.get("logging", {}).get("level", "info"),
        log_format=doc.get("logging", {}).get("format", "human"),
        state=StateConfig(**doc.get("state", {})),
        tracing=TracingConfig(**doc.get("tracing", {})),
        resilience=_resilience(doc.get("resilience", {})),
        web_search=doc.get("web_search"),
    )


def _deployments(route: dict[str, Any]) -> tuple[RouteProvider, ...]:
    return tuple(
        RouteProvider(d) if isinstance(d, str) else RouteProvider(d["provider"], float(d.get("weight", 1)), d.get("upstream_model"))
        for d in route.get("providers", ())
    )


def _provider(name: str, p: dict[str, Any]) -> ProviderConfig:
    fields = {k: tuple(v) if k == "models" else v for k, v in p.items()}
    pool = fields.pop("api_keys", None)
    if pool is not None:
        keys = tuple(k if isinstance(k, str) else k["key"] for k in pool)
        weights = tuple(1.0 if isinstance(k, str) else float(k.get("weight", 1)) for k in pool)
        fields.update(api_keys=keys, key_weights=weights)
        fields.setdefault("api_key", keys[0] if keys else "")
    else:
        fields.setdefault("api_key", "")
        fields.update(api_keys=(fields["api_key"],), key_weights=(1.0,))
    return ProviderConfig(name=name, **fields)


def _resilience(doc: dict[str, Any]) -> ResilienceConfig:
    fields = dict(doc)
    fields["breaker"] = BreakerConfig(**fields.get("breaker", {}))
    return ResilienceConfig(**fields)




def _check_pool(name: str, p: ProviderConfig, problems: list[tuple[str, str]]) -> None:
    base = f"providers.{name}"
    if not p.api_keys:
        problems.append((f"{base}.api_keys", "an empty pool: list at least one key"))
    if len(set(p.api_keys)) != len(p.api_keys):
        problems.append((f"{base}.api_keys", "the same key is listed twice"))


def _check_clients(clients: tuple[ClientKey, ...], problems: list[tuple[str, str]]) -> None:
    keys: set[str] = set()
    names: set[str] = set()
    for i, client in enumerate(clients):
        if client.key in keys:
            problems.append((f"server.api_keys[{i}]", "the same key is listed twice"))
        if client.name in names:
            problems.append((f"server.api_keys[{i}].name", f"the name {client.name!r} is given twice"))
        keys.add(client.key)
        names.add(client.name)


def _check_references(doc: dict[str, Any], problems: list[tuple[str, str]]) -> None:
    """Every provider name routing refers to is one of `providers`. Checked on the document,
    beside the schema, so a typo in a name shows up with the schema's problems, not after them."""
    known = doc.get("providers") if isinstance(doc.get("providers"), dict) else {}
    routing = doc.get("routing") if isinstance(doc.get("routing"), dict) else {}
    defaults = routing.get("default_providers")
    for protocol, name in (defaults.items() if isinstance(defaults, dict) else ()):
        _check_reference(f"routing.default_providers.{protocol}", name, known, problems)
    routes = routing.get("routes")
    for i, route in enumerate(routes if isinstance(routes, list) else ()):
        if not isinstance(route, dict):
            continue
        base = f"routing.routes[{i}]"
        _check_reference(f"{base}.provider", route.get("provider"), known, problems)
        for key in ("providers", "fallbacks"):
            entries = route.get(key)
            for j, entry in enumerate(entries if isinstance(entries, list) else ()):
                name = entry.get("provider") if isinstance(entry, dict) else entry
                _check_reference(f"{base}.{key}[{j}]", name, known, problems)


def _check_reference(path: str, name: Any, known: dict, problems: list[tuple[str, str]]) -> None:
    if isinstance(name, str) and name not in known:  # not a string: the schema says so
        problems.append(Problem(path, f"unknown provider {name!r}", hint=_did_you_mean(name, known)))


def _check_protocols(doc: dict[str, Any], wire, problems: list[tuple[str, str]]) -> None:
    """Every protocol the config names is one the rules describe (built-in, or a rules_dir's)."""
    known = wire.names

    def check(path: str, value: Any) -> None:
        if isinstance(value, str) and value not in known:  # not a string: the schema says so
            problems.append(Problem(path, f"must be one of: {', '.join(known)} (got {value!r})",
                                    hint=_did_you_mean(value, known)))

    for name, p in (doc.get("providers") or {}).items() if isinstance(doc.get("providers"), dict) else ():
        if isinstance(p, dict):
            check(f"providers.{name}.protocol", p.get("protocol"))
    routing = doc.get("routing") if isinstance(doc.get("routing"), dict) else {}
    defaults = routing.get("default_providers")
    for protocol in defaults if isinstance(defaults, dict) else ():
        if protocol not in known:
            problems.append(Problem(f"routing.default_providers.{protocol}", "unknown key",
                                    hint=_did_you_mean(protocol, known)))
    for i, r in enumerate(routing.get("routes") or () if isinstance(routing.get("routes"), list) else ()):
        if isinstance(r, dict) and "request_protocol" in r:
            check(f"routing.routes[{i}].request_protocol", r["request_protocol"])


def _check_options(name: str, p: ProviderConfig, wire, problems: list[tuple[str, str]]) -> None:
    """A provider setting some protocols' descriptors claim (`upstream.options`) is only
    valid for providers of those protocols."""
    if p.protocol not in wire:
        return
    owners: dict[str, list[str]] = {}
    for protocol in wire.names:
        for key in wire.options(protocol):
            owners.setdefault(key, []).append(protocol)
    for key, claimed in owners.items():
        if p.protocol not in claimed and getattr(p, key) != ProviderConfig.__dataclass_fields__[key].default:
            problems.append((f"providers.{name}.{key}", f"only valid for {' or '.join(claimed)} providers"))


def _check_semantics(cfg: Config, wire, problems: list[tuple[str, str]]) -> None:
    if cfg.server.metrics.require_auth and not cfg.server.api_keys:
        problems.append(("server.metrics.require_auth", "needs server.api_keys (the keys /metrics then requires)"))
    if not cfg.server.inspector.loopback_only and not cfg.server.api_keys:
        problems.append(("server.inspector.loopback_only", "false needs server.api_keys (the keys /_proxai/ then requires)"))
    _check_clients(cfg.server.clients, problems)
    for name, p in cfg.providers.items():
        _check_pool(name, p, problems)
        _check_options(name, p, wire, problems)
    if cfg.state.backend == "redis" and cfg.state.url and not cfg.state.url.startswith(("redis://", "rediss://", "unix://")):
        problems.append(("state.url", "a redis backend needs a redis://, rediss:// or unix:// URL"))
    names: dict[str, int] = {}
    for i, route in enumerate(cfg.routes):
        base = f"routing.routes[{i}]"
        chain = [route.provider]
        if route.providers:
            chain = []
            for j, d in enumerate(route.providers):  # unknown providers: _check_references
                if d.provider in chain:
                    problems.append((f"{base}.providers[{j}]", f"provider {d.provider!r} is listed twice"))
                chain.append(d.provider)
        balanced = set(chain) if route.providers else set()
        for j, fb in enumerate(route.fallbacks):
            if fb.provider in balanced:
                problems.append((f"{base}.fallbacks[{j}]", f"provider {fb.provider!r} is already one of this "
                                 f"route's providers ({', '.join(d.provider for d in route.providers)}); "
                                 "fallbacks are tried after all of them"))
            elif fb.provider in chain:
                problems.append((f"{base}.fallbacks[{j}]", "a cycle: provider "
                                 f"{fb.provider!r} is already in this route's chain ({' -> '.join(chain)})"))
            chain.append(fb.provider)
        if route.name in names:
            problems.append((f"{base}.name", f"duplicate route name {route.name!r} (also routes[{names[route.name]}])"))
        names.setdefault(route.name, i)
        try:
            compile_route(route)
        except ValueError as exc:
            field_name = "upstream_model" if getattr(exc, "field", None) == "upstream_model" else "model_pattern"
            problems.append((f"{base}.{field_name}", str(exc)))
