"""The wire surface of every protocol, read from the descriptors (`protocol.yaml`).

One `Wire` answers what the server must know around a codec: which protocols exist
(the rules folders with a `protocol.yaml`), their family and features, the client
endpoints, the headers toward the provider, the upstream URL of an operation and
whether a stream may carry SSE comments. The server asks it; it never compares
protocol ids itself.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping
from urllib.parse import quote

from .errors import InvalidRequest, RuleError
from .hooks import PROTOCOL_OBJECTS
from .protocol import Descriptor

# Printable ASCII without controls: a client header value that is anything else (bytes that
# are not UTF-8, a stray CR) is dropped rather than sent upstream mangled.
_TOKEN = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,254}[\x21-\x7e])?")


def is_token(value: str | None) -> bool:
    return bool(value) and _TOKEN.fullmatch(value) is not None


def model_segment(model: str | None, title: str) -> str:
    """A model name as the one path segment it must stay (`/models/{model}:method`):
    `/`, `?`, `#`, `%`, `:` and every control or non-ASCII byte are escaped, so no client
    model can reach another path or add to the query of a request that carries the key."""
    name = (model or "").removeprefix("models/")
    if not name:
        raise InvalidRequest(f"the model routes to a {title} provider but names no model (an empty name after "
                             "models/)", param="model")
    return quote(name, safe="-._~@")


@dataclass(frozen=True)
class Target:
    """Where an operation goes upstream: the path below the provider's base_url and a raw query."""
    path: str
    query: str = ""


@dataclass(frozen=True)
class ModelPath:
    """A client request to a model-in-path endpoint (`/v1beta/models/{model}:generateContent`)."""
    protocol: str
    operation: str   # generate, count_tokens
    stream: bool     # the path is the endpoint's stream_path
    model: str       # the path's model, as sent


class Wire:
    """Every protocol's wire surface; built from the layered descriptors."""

    def __init__(self, descriptors: Mapping[str, Descriptor], tables: Mapping | None = None):
        self.descriptors = dict(descriptors)
        self.tables = dict(tables or {})  # the rules' tables (a header's `values.drop`)
        # By each descriptor's `order` (documentation tables, messages), then by name.
        self.names: tuple[str, ...] = tuple(sorted(
            self.descriptors, key=lambda p: (self.descriptors[p].doc.get("order", float("inf")), p)))

    def __contains__(self, protocol) -> bool:
        return protocol in self.descriptors

    def _d(self, protocol: str) -> Descriptor:
        try:
            return self.descriptors[protocol]
        except KeyError:
            raise InvalidRequest(f"no protocol named {protocol!r} in the rules") from None

    # --- what a protocol is -----------------------------------------------------------
    def family(self, protocol: str) -> str | None:
        return self._d(protocol).family

    def title(self, protocol: str) -> str:
        return self._d(protocol).doc.get("title") or protocol

    def of_family(self, family: str) -> tuple[str, ...]:
        """The protocols of an API family, the family's first (its default answer shape) first."""
        return tuple(p for p in self.names if self.descriptors[p].family == family)

    def families(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(self.descriptors[p].family for p in self.names if self.descriptors[p].family))

    def has(self, protocol: str | None, feature: str) -> bool:
        """Whether the protocol declares `feature` (e.g. `stored_responses`)."""
        return protocol in self.descriptors and feature in (self.descriptors[protocol].doc.get("features") or ())

    def with_feature(self, feature: str) -> tuple[str, ...]:
        return tuple(p for p in self.names if self.has(p, feature))

    def state(self, protocol: str | None) -> dict | None:
        """The protocol's `state:` section (the proxy's server-side state for its clients), or None."""
        if protocol not in self.descriptors:
            return None
        return self.descriptors[protocol].section("state") or None

    # --- the client side --------------------------------------------------------------
    def endpoint(self, protocol: str, operation: str) -> dict | None:
        """The client endpoint of an operation (`generate`, `count_tokens`), or None."""
        value = self._d(protocol).section("endpoints").get(operation)
        return value if isinstance(value, dict) else None

    def body_paths(self, operation: str) -> dict[str, str]:
        """path -> protocol of the client endpoints whose body names the model (no `{model}` in the path),
        also with each root of the descriptor's `endpoints.also_under` in place of its own first segment."""
        out = {}
        for p in self.names:
            ep = self.endpoint(p, operation)
            if ep and "{model}" not in ep["path"]:
                path = ep["path"]
                out[path] = p
                for root in self._d(p).section("endpoints").get("also_under") or ():
                    out.setdefault(root + "/" + path.split("/", 2)[2], p)
        return out

    def model_paths(self) -> tuple[tuple[str, str, str, str, bool], ...]:
        """(prefix, suffix, protocol, operation, stream) of every model-in-path client
        endpoint: the path template split at `{model}`, also with each root of the
        descriptor's `endpoints.also_under` in place of its own first segment."""
        out = []
        for p in self.names:
            section = self._d(p).section("endpoints")
            roots = section.get("also_under") or ()
            for operation in ("generate", "count_tokens"):
                ep = self.endpoint(p, operation) or {}
                for key, stream in (("path", False), ("stream_path", True)):
                    template = ep.get(key)
                    if not template or "{model}" not in template:
                        continue
                    prefix, _, suffix = template.partition("{model}")
                    for head in (prefix, *(root + "/" + prefix.split("/", 2)[2] for root in roots)):
                        out.append((head, suffix, p, operation, stream))
        return tuple(out)

    def model_path(self, path: str) -> ModelPath | None:
        """The model-in-path endpoint `path` names, or None. Model names may hold slashes
        (`models/chat/gpt-4o`: routing prefixes); the endpoint's suffix ends the path."""
        for prefix, suffix, protocol, operation, stream in self.model_paths():
            if path.startswith(prefix) and path.endswith(suffix) and len(path) > len(prefix) + len(suffix):
                return ModelPath(protocol, operation, stream, path[len(prefix):len(path) - len(suffix)])
        return None

    def body_fields(self, protocol: str) -> tuple[str, str]:
        """The body fields a body endpoint reads the model and the stream flag from
        (the generate endpoint's `model` and `stream`; default model and stream)."""
        ep = self.endpoint(protocol, "generate") or {}
        return ep.get("model", "model"), ep.get("stream", "stream")

    def count_answer(self, protocol: str, tokens: int) -> dict:
        """A client count_tokens answer in the protocol's shape."""
        ep = self.endpoint(protocol, "count_tokens") or {}
        return {**(ep.get("answer") or {}), ep.get("count", "input_tokens"): tokens}

    def count_fill(self, protocol: str) -> dict:
        """Fields the generation request requires that a counting request leaves out."""
        return dict((self.endpoint(protocol, "count_tokens") or {}).get("fill") or {})

    def user_fields(self, protocol: str) -> tuple[str, ...]:
        """Body fields naming the end user (they keep a conversation on one key)."""
        return tuple((self.endpoint(protocol, "generate") or {}).get("user") or ())

    def models(self, protocol: str) -> dict:
        """The protocol's `models:` section: its model list's page, prefix and not-found code."""
        return self._d(protocol).section("models")

    def marks(self, family: str, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
        """Whether a request on a shared path (`/v1/models`) comes from a client of `family`."""
        for p in self.of_family(family):
            marks = self._d(p).section("headers").get("client_marks") or {}
            if any(h in headers for h in marks.get("headers") or ()) or any(q in query for q in marks.get("query") or ()):
                return True
        return False

    def client_key(self, protocol: str, headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
        """The client's key where the protocol's clients send it (None: the common headers)."""
        where = self._d(protocol).section("headers").get("client_key") or {}
        for name in where.get("headers") or ():
            if name in headers:
                return headers[name]
        for name in where.get("query") or ():
            if name in query:
                return query[name]
        return None

    def request_id_header(self, protocol: str | None) -> str:
        """The response header the protocol's SDK reports as the request id (and its providers send)."""
        d = self.descriptors.get(protocol or "")
        return (d.section("headers").get("request_id") if d else None) or "x-request-id"

    def turn_state_header(self, protocol: str | None) -> str | None:
        """The header whose token keeps a turn's requests on one key (None: the protocol has none)."""
        d = self.descriptors.get(protocol or "")
        return d.section("headers").get("turn_state") if d else None

    def comments_allowed(self, protocol: str) -> bool:
        """Whether the protocol's clients accept SSE comments (heartbeats) in a stream."""
        return self._d(protocol).section("stream").get("comments", True) is not False

    # --- the provider side ------------------------------------------------------------
    def upstream(self, protocol: str, operation: str) -> dict | None:
        value = self._d(protocol).section("upstream").get(operation)
        return value if isinstance(value, dict) else None

    def target(self, protocol: str, operation: str, model: str | None = None, stream: bool = False) -> Target | None:
        """Where `operation` goes on a provider of `protocol` (None: it has no such endpoint)."""
        op = self.upstream(protocol, operation)
        if op is None:
            return None
        if stream and isinstance(op.get("stream"), dict):
            op = {**op, **op["stream"]}
        path = op["path"]
        if "{model}" in path:
            path = path.replace("{model}", model_segment(model, self.title(protocol)))
        return Target(path, op.get("query", ""))

    def count_request(self, protocol: str, translated: dict, model: str) -> dict:
        """A translated generation request reduced to what the counting endpoint accepts."""
        op = self.upstream(protocol, "count_tokens") or {}
        accepted = set(op.get("accepts") or ())
        out = {k: v for k, v in translated.items() if k in accepted}
        wrap = op.get("wrap")
        if wrap:
            name = model.removeprefix("models/")
            head = {k: v.replace("{model}", name) for k, v in (wrap.get("with") or {}).items()}
            out = {wrap["field"]: {**head, **out}}
        return out

    def count_field(self, protocol: str) -> str:
        return (self.upstream(protocol, "count_tokens") or {}).get("count", "input_tokens")

    def options(self, protocol: str) -> tuple[str, ...]:
        """Provider settings of the config that only this protocol's providers take."""
        return tuple(self._d(protocol).section("upstream").get("options") or ())

    def client_dependent_headers(self, protocol: str) -> bool:
        """Whether the provider headers depend on the client's (some are passed on)."""
        return bool(self._d(protocol).section("headers").get("from_client"))

    def provider_headers(self, protocol: str, key: str, settings, client_headers: Mapping[str, str]) -> dict[str, str]:
        """Auth and passed-on client headers toward a provider. `settings` has the provider's
        config (its `auth` choice, defaults named by `from_client`). Only the provider's key
        goes upstream, never the client's."""
        section = self._d(protocol).section("headers")
        auth = section.get("auth") or {}
        chosen = auth.get(getattr(settings, "auth", None)) or next(iter(auth.values()), {})
        headers = {name: value.replace("{key}", key) for name, value in chosen.items()}
        for name, how in (section.get("from_client") or {}).items():
            how = how or {}
            if how.get("join"):
                values = client_headers.getall(name, None) if hasattr(client_headers, "getall") else None
                if values is None and client_headers.get(name):
                    values = [client_headers[name]]
                values = [v for v in values or () if is_token(v)]
                if how.get("values"):
                    values = self._permitted(how["values"], settings, values)
                if values:
                    headers[name] = how["join"].join(values)
                continue
            value = client_headers.get(name)
            if is_token(value):
                headers[name] = value
            elif how.get("default"):
                headers[name] = getattr(settings, how["default"])
        return headers

    def _permitted(self, spec: Mapping, settings, values: list[str], name: str = "", notes: list | None = None) -> list[str]:
        """A list header's values (each may be comma-separated) without those of the
        `drop` table and as the provider's `setting` ({allow: [...], deny: [...]}, a
        trailing * a prefix) permits; what is left out goes to `notes`."""
        drop = self.tables.get(spec.get("drop"))
        setting = spec.get("setting") or ""
        policy = getattr(settings, setting, None) or {}
        allow, deny = policy.get("allow"), policy.get("deny") or ()
        out: list[str] = []
        for raw in values:
            for value in (v.strip() for v in raw.split(",")):
                if not value or value in out:
                    continue
                why = drop.lookup(value) if drop is not None else None
                if why is not None:
                    if notes is not None:
                        notes.append(f"{name} {value} not sent: obsolete ({why})")
                elif (allow is None or _listed(value, allow)) and not _listed(value, deny):
                    out.append(value)
                elif notes is not None:
                    notes.append(f"{name} {value} not sent: the provider's {setting} do not permit it")
        return out

    def header_notes(self, protocol: str, settings, client_headers: Mapping[str, str]) -> list[str]:
        """What provider_headers leaves out of the client's list headers, one note each."""
        notes: list[str] = []
        for name, how in (self._d(protocol).section("headers").get("from_client") or {}).items():
            if (how or {}).get("values"):
                values = client_headers.getall(name, None) if hasattr(client_headers, "getall") else None
                if values is None and client_headers.get(name):
                    values = [client_headers[name]]
                self._permitted(how["values"], settings, [v for v in values or () if is_token(v)], name, notes)
        return notes


def _listed(value: str, patterns) -> bool:
    return any(value == p or (p.endswith("*") and value.startswith(p[:-1])) for p in patterns)


def protocol_hooks(protocols: Mapping[str, tuple]) -> tuple[dict, list[RuleError]]:
    """The hooks of the protocols whose descriptor names modules of their own (`hooks:
    hooks.py`, or a list of them, beside the protocol.yaml): each one's literal ``HOOKS``
    table, every name ``<protocol>.<name>``. A protocol added by a rules_dir brings its
    Python this way."""
    hooks, problems = {}, []
    for name, (doc, file) in protocols.items():
        modules = doc.get("hooks") or ()
        for module_file in [modules] if isinstance(modules, str) else modules:
            _load_hooks(name, doc, file, module_file, hooks, problems)
    return hooks, problems


def _load_hooks(name: str, doc, file, module_file: str, hooks: dict, problems: list) -> None:
    import importlib.util

    path = Path(file).parent / module_file
    line = getattr(doc, "key_lines", {}).get("hooks")
    try:
        stem = Path(module_file).stem
        spec = importlib.util.spec_from_file_location(f"proxai_protocol_hooks.{name}.{stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (OSError, ImportError, SyntaxError) as err:
        problems.append(RuleError(f"hooks module {module_file}: cannot load: {err}", file, line))
        return
    table = getattr(module, "HOOKS", None)
    if not isinstance(table, dict):
        problems.append(RuleError(f"hooks module {module_file} has no HOOKS table", file, line))
        return
    for key, fn in table.items():
        if not str(key).startswith(name + "."):
            problems.append(RuleError(f"hooks module {module_file}: hook {key!r} must be named {name}.<name>",
                                      file, line))
        elif key in hooks:
            problems.append(RuleError(f"hooks module {module_file}: hook {key!r} is already defined by another "
                                      "hooks module of the protocol", file, line))
        else:
            hooks[key] = fn
    for key, cls in (getattr(module, "OBJECTS", None) or {}).items():
        if not str(key).startswith(name + "."):
            problems.append(RuleError(f"hooks module {module_file}: state object {key!r} must be named {name}.<name>",
                                      file, line))
        else:
            PROTOCOL_OBJECTS[key] = cls
