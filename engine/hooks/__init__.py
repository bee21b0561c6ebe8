"""Hooks: the named Python functions rules call for stateful or algorithmic steps.

Every hook has one signature, ``hook(scope, **args) -> value``; ``scope.cur`` is
the data item, ``scope.vars["state"]`` the per-stream state, ``scope.ctx`` the
request context. Each module exports a literal ``HOOKS`` table; this registry is
their union, and rule files name hooks by these keys (the linter checks them).

Stream rules' stateful parts are small classes in :data:`OBJECTS` (one instance per
stream, built with the request context); a stream file declares one under ``state:``
as ``name: {object: registered.name}`` and calls its methods as hooks ``name.method``.
"""
from . import (
    anthropic, anthropic_stream, caching, ceilings, chat, chat_stream, common, continuation, fit, gemini, gemini_client, responses,
    responses_stream,
)
from . import instructions
from . import context_editing
from . import web_search
from . import compaction_items
from . import models

HOOKS = {
    **common.HOOKS,
    **continuation.HOOKS,
    **chat.HOOKS,
    **responses.HOOKS,
    **anthropic.HOOKS,
    **anthropic_stream.HOOKS,
    **caching.HOOKS,
    **ceilings.HOOKS,
    **fit.HOOKS,
    **gemini_client.HOOKS,
    **gemini.HOOKS,
    **instructions.HOOKS,
    **models.HOOKS,
    **context_editing.HOOKS,
    **web_search.HOOKS,
    **compaction_items.HOOKS,
}

OBJECTS = {
    **chat_stream.OBJECTS,
    **anthropic_stream.OBJECTS,
    **responses_stream.OBJECTS,
    **gemini_client.OBJECTS,
    **gemini.OBJECTS,
}

#: Stream state objects of protocol folders' own hooks modules (their ``OBJECTS`` tables,
#: names ``<protocol>.<name>``), added as a folder's modules load (engine/wire.py).
PROTOCOL_OBJECTS: dict = {}
