"""The paths the proxy serves, with and without the `/v1` prefix, and which protocol's
shape an answer on a path takes (errors included)."""

from __future__ import annotations

import re
from typing import Mapping

from engine.wire import Wire

PREFIX = "/v1"
MODELS = "/v1/models"
_VERSIONED = re.compile(r"/v\d+[a-z]\w*(/|$)")


def canonical(path: str) -> str:
    """`/messages` and `/v1/messages` are the same endpoint (several clients and proxies
    of this kind leave the prefix out); the canonical form has it. A path under another
    version root (`/v1beta/interactions`) is its own canonical form."""
    if path == PREFIX or path.startswith(PREFIX + "/") or _VERSIONED.match(path):
        return path
    return PREFIX + path


def unprefixed(path: str) -> str | None:
    """The path without the `/v1` prefix (None: it has none to leave out)."""
    return path[len(PREFIX):] if path.startswith(PREFIX + "/") else None


class Surface:
    """The client paths of every protocol, from its descriptor's `endpoints`, and which
    protocol's shape an answer on a path takes (errors included)."""

    def __init__(self, wire: Wire):
        self.wire = wire
        # POST endpoints whose body is a request of the protocol (the model in the body).
        self.generate = wire.body_paths("generate")
        # POST endpoints that count a request's input tokens.
        self.count_tokens = wire.body_paths("count_tokens")
        # A path family's word (`messages` of /v1/messages): later protocols first, so
        # /v1/chat/messages stays Anthropic's as it always was.
        self._words = [(path.split("/")[2], protocol) for path, protocol in reversed(list(self.generate.items()))
                       if path.startswith(PREFIX + "/")]
        # Model-in-path endpoints (`/v1beta/models/{model}:generateContent`): their version
        # root, and the methods after the model, which are also served under /v1/models/.
        self._roots: dict[str, str] = {}
        self._methods: dict[str, str] = {}
        for protocol in wire.names:
            for operation in ("generate", "count_tokens"):
                ep = wire.endpoint(protocol, operation) or {}
                for template in (ep.get("path"), ep.get("stream_path")):
                    if template and "{model}" in template:
                        self._roots.setdefault("/" + template.split("/")[1], protocol)
                        self._methods[template.rpartition(":")[2]] = protocol

    def _model_method(self, path: str) -> str | None:
        if path.startswith(PREFIX + "/models/"):
            return self._methods.get(path.rpartition(":")[2])
        return None

    def protocol_for(self, path: str, headers: Mapping[str, str]) -> str:
        """The protocol whose shape an answer on `path` takes. A path in one API family answers
        in its shape (`/v1/messages/...` and even `/v1/v1/messages` are Anthropic's); shared
        and unknown paths by the client's headers."""
        served = canonical(path.rstrip("/") or "/")
        if served in self.generate:  # a body endpoint under a model-in-path root (/v1beta/interactions)
            return self.generate[served]
        for root, protocol in self._roots.items():
            if path == root or path.startswith(root + "/"):
                return protocol
        by_method = self._model_method(path)
        if by_method is not None:
            return by_method
        path = served
        if path in self.count_tokens:
            return self.count_tokens[path]
        segments = path.split("/")
        for word, protocol in self._words:
            if word in segments:
                return protocol
        return self.client_family_protocol(headers, {})

    def client_family(self, headers: Mapping[str, str], query: Mapping[str, str]) -> str | None:
        """The API family a client on a shared path (`/v1/models`) belongs to, by the
        headers and query parameters its SDK sends (the descriptors' `client_marks`);
        else the first protocol's family."""
        for family in self.wire.families():
            if self.wire.marks(family, headers, query):
                return family
        return self.wire.family(self.wire.names[0]) if self.wire.names else None

    def client_family_protocol(self, headers: Mapping[str, str], query: Mapping[str, str]) -> str:
        family = self.client_family(headers, query)
        return self.wire.of_family(family)[0] if family else self.wire.names[0]
