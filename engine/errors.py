"""Exceptions raised by the translation engine.

    ProxaiError
    ├── RuleError               a rule file is broken (raised at load time; message is ``file:line: problem``)
    └── TranslationError        a payload cannot be translated
        ├── InvalidRequest      the client's request cannot be expressed for the provider (HTTP 400, names ``param``)
        └── UpstreamProtocolError  the provider broke its own protocol (HTTP 502, or an in-stream error)

Foreign exceptions raised while a rule is evaluated are mapped to the most
specific of these with ``raise ... from``; the engine, not the rule, adds where
in the data (``param``) and where in the rules (``rule``) it failed.
"""
from __future__ import annotations


class ProxaiError(Exception):
    """Base of every error the engine raises."""


class RuleError(ProxaiError):
    """A rule file is invalid. ``str(err)`` is ``file:line: problem``."""

    def __init__(self, problem: str, file: str | None = None, line: int | None = None):
        self.problem, self.file, self.line = problem, file, line
        where = f"{file}:{line or 0}: " if file else ""
        super().__init__(where + problem)


class TranslationError(ProxaiError):
    """A payload could not be translated; ``rule`` names the rule location."""

    status = 500

    def __init__(self, message: str, param: str | None = None, rule: str | None = None):
        self.message, self.param, self.rule = message, param, rule
        super().__init__(message)


class InvalidRequest(TranslationError):
    """The request is malformed or uses something the provider protocol cannot express."""

    status = 400


class UpstreamProtocolError(TranslationError):
    """The provider's answer violates its own protocol (bad JSON arguments, unknown stop...)."""

    status = 502
