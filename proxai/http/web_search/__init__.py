"""Web search on translated routes (`web_search:` in the config, docs/web-search.md).

A client's hosted web search tool (Anthropic's `web_search_20250305` server tool, the
Responses `web_search` tool) cannot be run by a provider of another protocol. With a
search backend configured, the provider is offered an ordinary function tool in its
place; when the model calls it, the proxy runs the search (backends.py) and continues
the model with the results, all inside the one client request (serve.py), and the client
gets the searches back in its own protocol's blocks (rounds.py, the client's encoders).
Without a backend the tool is still left out, and the provider's system prompt says so.
"""

from proxai.http.web_search.serve import serve, translate_request

__all__ = ["serve", "translate_request"]
