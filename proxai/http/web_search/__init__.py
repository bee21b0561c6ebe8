"""Web search on translated routes (`web_search:` in the config, docs/web-search.md).

A client's hosted web search tool (Anthropic's `web_search_20250305` server tool, the
Responses `web_search` tool) cannot be run by a provider of another protocol. With a
search backend configured, the provider is offered an ordinary function tool in its
place (offer.py); when the model calls it, the proxy runs the search (backends.py) and
continues the model with the results inside the one client request: the server-tool
loop, proxai/http/server_tools/, shared with tool search. The client gets the searches
back in its own protocol's blocks (the client's encoders). Without a backend the tool is
still left out, and the provider's system prompt says so.
"""

from proxai.http.web_search.offer import offer

__all__ = ["offer"]
