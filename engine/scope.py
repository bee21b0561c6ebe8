"""What a running template sees: the current item, the variables, the data path, the context.

The generated Python of :mod:`engine.codegen` keeps these in local variables and builds a
:class:`Scope` only where a hook or a failure needs one.
"""
from __future__ import annotations

from typing import Any, Callable

from .errors import InvalidRequest

Fn = Callable[["Scope"], Any]


class Scope:
    """Where evaluation stands: current item, variables, data path, context."""

    __slots__ = ("cur", "vars", "path", "ctx", "run")

    def __init__(self, cur, vars, path, ctx, run):
        self.cur, self.vars, self.path, self.ctx, self.run = cur, vars, path, ctx, run

    def at(self, cur, path=None, **bind) -> "Scope":
        vars = self.vars
        if bind:
            vars = {**vars, **bind}
        return Scope(cur, vars, self.path if path is None else path, self.ctx, self.run)

    def param(self, sub: str | None = None) -> str | None:
        path = self.path
        if sub:
            if not path and self.ctx is not None:
                sub = self.ctx.param_names.get(sub, sub)
            path = f"{path}.{sub}" if path else sub
        return path or None

    def fail(self, message: str, sub: str | None = None, rule: str | None = None):
        raise self.run.error_class(message, self.param(sub), rule)


class Run:
    """What one evaluation needs besides data: the error class for its direction."""

    __slots__ = ("error_class", "annotate_paths")

    def __init__(self, error_class=InvalidRequest, annotate_paths=False):
        self.error_class, self.annotate_paths = error_class, annotate_paths


class _Null:
    """A JSON null that is kept: object keys built from it stay, with value null."""

    def __repr__(self):
        return "NULL"


NULL = _Null()


class _Miss:
    def __repr__(self):
        return "MISS"


#: what a table lookup returns for a key it does not have
MISS = _Miss()
