"""Hooks: the named Python functions rules call for stateful or algorithmic steps.

Every hook has one signature, ``hook(scope, **args) -> value``; ``scope.cur`` is
the data item, ``scope.vars["state"]`` the per-stream state, ``scope.ctx`` the
request context. Each module exports a literal ``HOOKS`` table; this registry is
their union, and rule files name hooks by these keys (the linter checks them).
"""
from . import anthropic, caching, chat, common, continuation, fit, gemini, responses

HOOKS = {
    **common.HOOKS,
    **continuation.HOOKS,
    **chat.HOOKS,
    **responses.HOOKS,
    **anthropic.HOOKS,
    **caching.HOOKS,
    **fit.HOOKS,
    **gemini.HOOKS,
}
