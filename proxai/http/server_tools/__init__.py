"""Server tools the proxy runs itself inside one client request (docs/web-search.md,
docs/tool-search.md).

A translated request may offer the provider a function tool the proxy answers
(``ctx.server_tools``, by the name the provider sees): the client's hosted web search
with a backend configured (proxai/http/web_search/), tool search emulation
(engine/hooks/tool_search.py); one request may offer both. When the model calls one, the
proxy runs it (kinds.py), sends the provider the conversation with the call and its
result, and goes on (loop.py); the client gets one answer in which each run shows as the
server-tool blocks its own API sends. Toward a streaming client every provider call is
streamed and the client's stream is written as it comes (stream.py).
"""

from proxai.http.server_tools.loop import active
from proxai.http.server_tools.serve import prepare, serve

__all__ = ["active", "prepare", "serve"]
