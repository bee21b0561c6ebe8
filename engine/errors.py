"""Every exception the proxy raises on purpose: one tree for the engine and the server.

    ProxaiError
    ├── RuleError                   a rule file is broken (load time; ``str(err)`` is ``file:line: problem``)
    ├── ConfigError                 the config file is invalid (startup; never sent to a client)
    └── ProxyError                  answered to a client as an error, in the client's protocol
        ├── TranslationError        a payload cannot be carried between protocols (500 unless a subclass says)
        │   ├── InvalidRequest      400: body not JSON, wrong types, a field the provider cannot express
        │   │   └── RoutingError    400: no route and no default, or a request_protocol guard mismatch
        │   └── UpstreamProtocolError  502: the provider broke its own protocol (also an UpstreamFailure)
        ├── Unauthorized            401: inbound auth configured, key missing or wrong
        ├── NotFound                404: unknown path
        ├── MethodNotAllowed        405: known path, wrong method
        ├── RequestTimeout          408: the body did not arrive within server.request_body_timeout_secs
        ├── RequestTooLarge         413: body over server.max_request_body_bytes
        ├── RateLimited             429: a named client key over one of its limits (with Retry-After)
        ├── Overloaded              503: server.max_concurrent_requests reached, or shutting down
        ├── StateUnavailable        503: the state store (stored responses, interactions) cannot be read or written
        ├── InternalError           500: a bug; the body never carries internals
        └── UpstreamFailure         the provider failed us
            ├── UpstreamError       the provider answered non-2xx; its status is kept
            ├── UpstreamUnreachable 502: connect, DNS or TLS failure
            ├── UpstreamTimeout     504: nothing read within the idle-read timeout
            ├── UpstreamProtocolError  502: the provider's answer is malformed (see above)
            └── StreamError         502: a stream ended before its terminal event, or stalled

Every ProxyError carries ``status``, ``message`` and optionally ``param`` (where in the
client's data), ``code``, ``error_type`` (already in some protocol family's vocabulary),
``headers`` (upstream headers a client may see) and ``rule`` (the rule file:line that
failed: logged, never sent to a client). ``proxai.http.errors`` renders one into the bytes a
client of a given protocol expects.

Foreign exceptions are mapped once, where they arise, with ``raise ... from``: an
exception raised while a rule is evaluated becomes the most specific error above (the
engine adds ``param`` and ``rule``); aiohttp's client errors become UpstreamUnreachable
or UpstreamTimeout in ``proxai/http/transport.py``; the state store's errors become
StateUnavailable (a ProxyError, 503) in ``proxai/endpoints/responses_state.py``. Anything else that
escapes a request is a bug: the server answers InternalError and logs its type.
"""
from __future__ import annotations

import difflib
from typing import Mapping


class ProxaiError(Exception):
    """Base of every error the proxy raises on purpose."""


class RuleError(ProxaiError):
    """A rule file is invalid. ``str(err)`` is ``file:line: problem``."""

    def __init__(self, problem: str, file: str | None = None, line: int | None = None):
        self.problem, self.file, self.line = problem, file, line
        where = (f"{file}:{line}: " if line else f"{file}: ") if file else ""
        super().__init__(where + problem)


def suggestion(name, choices, cutoff: float = 0.6) -> str | None:
    """The hint "did you mean X?" for the choice nearest to a misspelt ``name``, if one is
    near (``cutoff``: difflib's similarity ratio, 0 to 1)."""
    close = difflib.get_close_matches(str(name), sorted(map(str, choices)), n=1, cutoff=cutoff)
    return f"did you mean {close[0]}?" if close else None


class Problem(tuple):
    """One problem of a config: a (path, message) pair to whoever unpacks or compares it, that
    may also know its place in the file (1-based line and column) and a hint ("did you mean ...?")."""

    def __new__(cls, path: str, message: str, *, line: int | None = None, column: int | None = None,
                hint: str | None = None):
        self = super().__new__(cls, (path, message))
        self.line, self.column, self.hint = line, column, hint
        return self

    def text(self, file: str | None = None) -> str:
        """`FILE:LINE:COL: key.path: message (hint)`, leaving out the parts it does not know."""
        path, message = self
        where = ":".join(str(x) for x in (file, self.line, self.column) if x is not None)
        body = f"{path}: {message}" if path else message
        body += f" ({self.hint})" if self.hint else ""
        return f"{where}: {body}" if where else body


class ConfigError(ProxaiError):
    """An invalid config file. `problems` lists (path, message) pairs (Problem, or plain
    pairs); the path is dotted. `file` is the config file, when there is one."""

    def __init__(self, problems: list[tuple[str, str]], file: str | None = None):
        self.problems, self.file = problems, file
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        """One line per problem, in file order (unplaced problems first)."""
        placed = [p if isinstance(p, Problem) else Problem(*p) for p in self.problems]
        placed.sort(key=lambda p: (p.line or 0, p.column or 0))
        return [p.text(self.file) for p in placed]


class ProxyError(ProxaiError):
    status = 500
    kind = "internal"

    def __init__(
        self,
        message: str,
        param: str | None = None,
        rule: str | None = None,
        *,
        status: int | None = None,
        code: str | None = None,
        error_type: str | None = None,
        type_family: str | None = None,
        headers: Mapping[str, str] | None = None,
    ):
        super().__init__(message)
        self.message = message
        if status is not None:
            self.status = status
        self.param = param
        self.rule = rule
        self.code = code
        # error_type is only reused for a client of the same family (openai/anthropic).
        self.error_type = error_type
        self.type_family = type_family
        self.headers = dict(headers or {})


class TranslationError(ProxyError):
    """A payload could not be translated; ``rule`` names the rule location."""

    kind = "translation"


class InvalidRequest(TranslationError):
    """The request is malformed or uses something the provider protocol cannot express."""

    status = 400
    kind = "invalid_request"


class RoutingError(InvalidRequest):
    kind = "routing"


class Unauthorized(ProxyError):
    status = 401
    kind = "unauthorized"


class NotFound(ProxyError):
    status = 404
    kind = "not_found"


class MethodNotAllowed(ProxyError):
    status = 405
    kind = "not_found"


class RequestTimeout(ProxyError):
    status = 408
    kind = "request_timeout"


class RequestTooLarge(ProxyError):
    status = 413
    kind = "too_large"


class RateLimited(ProxyError):
    status = 429
    kind = "rate_limited"


class Overloaded(ProxyError):
    status = 503
    kind = "overloaded"


class StateUnavailable(ProxyError):
    status = 503
    kind = "state_unavailable"


class InternalError(ProxyError):
    status = 500
    kind = "internal"


class UpstreamFailure(ProxyError):
    status = 502
    kind = "upstream"


class UpstreamError(UpstreamFailure):
    kind = "upstream_error"


class UpstreamUnreachable(UpstreamFailure):
    status = 502
    kind = "upstream_unreachable"


class UpstreamTimeout(UpstreamFailure):
    status = 504
    kind = "upstream_timeout"


class UpstreamProtocolError(UpstreamFailure, TranslationError):
    """The provider's answer violates its own protocol (bad JSON arguments, unknown stop...)."""

    status = 502
    kind = "upstream_protocol"


class StreamError(UpstreamFailure):
    status = 502
    kind = "stream_error"
