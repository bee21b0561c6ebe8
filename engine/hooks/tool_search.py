"""Tool search toward a provider that cannot run it (the ``tool_search`` policy).

A client's deferred tools (``defer_loading``) are loaded by a tool search its API
runs: the hosted search tool (Anthropic's ``tool_search_tool_regex_*`` /
``_bm25_*``) or the client's own search, whose results are ``tool_reference``
blocks. Run from ``fit.tools`` on the IR of a translated request:

* ``emulate`` (the default): only the tools that are not deferred, and the deferred
  tools a search already loaded in the history, are sent; the client's hosted search
  tool becomes a function the proxy answers itself (proxai/http/server_tools/), noted on
  ``ctx.server_tools``;
* ``eager``: every deferred tool is sent (fit.tools), the hosted search tool is left out;
* ``reject``: a 400 naming the search tool, or the first deferred tool.

Searches that ran (the history's ``server_tool_call`` + ``tool_search_result``
parts) reach the provider as a call of the proxy's search tool and its result, so
the model sees what it searched and what it found. The search itself (regex or
BM25 over names, descriptions and parameters) is :func:`search`; its settings and
the proxy tool's wording are rules/tables/tool_search.yaml.
"""
from __future__ import annotations

import math
import re

import orjson

from ..errors import InvalidRequest

CLIENT_TABLE = "tool_search.client_tool->search"
PROTOCOL_TABLE = "tool_search.client_protocol->emulated"
NATIVE_TABLE = "tool_search.provider_protocol->native"
TOOL_TABLE = "tool_search.search->tool"
SETTINGS = "tool_search.setting->value"
_WORD = re.compile(r"[A-Za-z][a-z]*|[A-Z]+(?![a-z])|\d+")


def setting(tables, name):
    table = (tables or {}).get(SETTINGS)
    return table.lookup(name) if table is not None else None


def _lookup(tables, name, key):
    table = (tables or {}).get(name)
    return table.lookup(key) if table is not None and isinstance(key, str) else None


def key(tool: dict):
    """The name a deferred tool is searched, loaded and called by: a namespace's tool by
    the flattened name the provider sees (names.wire_name), others by their name."""
    from .names import wire_name

    name = tool.get("name")
    return wire_name(tool["namespace"], name) if tool.get("namespace") and isinstance(name, str) else name


def fit(ir: dict, ctx, tables) -> dict:
    if _lookup(tables, NATIVE_TABLE, ctx.provider_protocol) is True and ctx.provider_protocol == ctx.client_protocol:
        return ir  # the provider runs the client's own search
    tools = ir.get("tools") if isinstance(ir.get("tools"), list) else []
    search_at, variant = None, None
    for i, tool in enumerate(tools):
        if isinstance(tool, dict) and tool.get("type") == "hosted":
            variant = _lookup(tables, CLIENT_TABLE, tool.get("hosted_type")) if tool.get("execution") != "client" else None
            if variant:
                search_at = i
                break
    deferred = [t for t in tools if isinstance(t, dict) and t.get("defer_loading") and t.get("type") != "hosted"]
    policy = getattr(ctx, "tool_search", "emulate")
    follows = _lookup(tables, PROTOCOL_TABLE, ctx.client_protocol)
    if policy == "emulate" and not (follows is True or (follows == "with_search" and search_at is not None)):
        policy = "eager"  # a client whose loading of deferred tools the proxy does not follow
    if policy == "reject" and (search_at is not None or deferred):
        tool = tools[search_at] if search_at is not None else deferred[0]
        what = f"tool search ({tool.get('hosted_type')})" if search_at is not None else "deferred tool loading (defer_loading)"
        raise InvalidRequest(f"{what} cannot be run by this provider (tool_search: reject)",
                             tool.get("_path") or "tools")
    spec = _lookup(tables, TOOL_TABLE, variant) if variant else None
    proxy_name = spec["name"] if isinstance(spec, dict) else None
    messages, loaded = _replay(ir.get("messages") or [], proxy_name, tables)
    if messages is not None:
        ir = {**ir, "messages": messages}
    if policy != "emulate" or not (deferred or search_at is not None):
        return ir
    out = []
    for i, tool in enumerate(tools):
        if i == search_at:
            if spec:
                out.append({"type": "function", "name": proxy_name, "description": description(spec, deferred, tables),
                            "parameters": spec.get("parameters"), "strict": False, "_path": tool.get("_path")})
                ctx.server_tools[proxy_name] = {
                    "kind": "tool_search", "search": variant, "client_name": tool.get("name") or proxy_name,
                    "catalog": [{**t, "name": key(t), "short_name": t.get("name")} for t in deferred]}
            continue
        if isinstance(tool, dict) and tool.get("defer_loading") and key(tool) not in loaded:
            continue
        out.append(tool)
    held = sum(1 for t in deferred if key(t) not in loaded)
    if held:
        how = "the proxy's search loads them" if search_at is not None else "a tool_reference loads them"
        ctx.trace(f"{held} deferred tools not sent until {how} (tool_search: emulate)")
    return {**ir, "tools": out}


def description(spec: dict, deferred: list, tables) -> str:
    """The proxy search tool's description; a search by path (a Responses client's
    tool_search) lists what can be loaded, as OpenAI shows its model: each namespace and
    each deferred tool outside one, by name and description."""
    text = spec.get("description") or ""
    if not spec.get("lists_catalog"):
        return text
    line = setting(tables, "catalog_line") or "- {name}: {description}"
    entries: dict = {}
    for tool in deferred:
        if tool.get("namespace"):
            entries.setdefault(tool["namespace"], tool.get("namespace_description") or "")
        else:
            entries.setdefault(key(tool), tool.get("description") or "")
    listing = "\n".join(line.format(name=name, description=about.strip()) for name, about in entries.items())
    return f"{text}\n\n{listing}" if listing else text


def _replay(messages: list, proxy_name: str | None, tables):
    """The history's searches as calls of the proxy's search tool and their results, and
    the names every search or tool_reference loaded. None: the messages are unchanged."""
    loaded: set = set()
    changed = False
    out: list = []
    messages = _paired(messages)
    # A Responses client's search call and its output are items of their own: the result
    # may be in another message than its call.
    results = {p.get("call_id"): p for msg in messages if isinstance(msg, dict) for p in msg.get("content") or ()
               if isinstance(p, dict) and p.get("type") == "tool_search_result"}
    for msg in messages:
        if not isinstance(msg, dict):
            out.append(msg)
            continue
        for part in msg.get("content") or ():
            if isinstance(part, dict):
                if part.get("type") == "tool_search_result":
                    loaded.update(n for n in part.get("tool_names") or () if isinstance(n, str))
                elif part.get("type") == "tool_result":
                    loaded.update(p.get("tool_reference") for p in part.get("content") or ()
                                  if isinstance(p, dict) and isinstance(p.get("tool_reference"), str))
        if msg.get("role") != "assistant" or not any(
                isinstance(p, dict) and p.get("type") in ("server_tool_call", "tool_search_result") for p in msg.get("content") or ()):
            out.append(msg)
            continue
        changed = True
        out.extend(_split(msg, proxy_name, tables, results))
    return (out if changed else None), loaded


def _paired(messages: list) -> list:
    """Searches whose call and result carry no common id (OpenAI's own server-run search
    has no call_id): each result goes with the earliest call before it still without one,
    and a call without any id gets one, as the provider's tool call needs."""
    calls = [p for m in messages if isinstance(m, dict) for p in m.get("content") or ()
             if isinstance(p, dict) and p.get("type") == "server_tool_call"]
    if all(p.get("id") for p in calls) and {p.get("id") for p in calls} >= {
            p.get("call_id") for m in messages if isinstance(m, dict) for p in m.get("content") or ()
            if isinstance(p, dict) and p.get("type") == "tool_search_result"}:
        return messages
    out, pending, n = [], [], 0
    for msg in messages:
        if not isinstance(msg, dict) or not isinstance(msg.get("content"), list):
            out.append(msg)
            continue
        parts = []
        for p in msg["content"]:
            if isinstance(p, dict) and p.get("type") == "server_tool_call":
                if not p.get("id"):
                    n += 1
                    p = {**p, "id": f"tool_search_{n}"}
                pending.append(p["id"])
            elif isinstance(p, dict) and p.get("type") == "tool_search_result":
                if p.get("call_id") in pending:
                    pending.remove(p["call_id"])
                elif pending:
                    p = {**p, "call_id": pending.pop(0)}
            parts.append(p)
        out.append({**msg, "content": parts})
    return out


def _split(msg: dict, proxy_name: str | None, tables, results: dict) -> list:
    """assistant [A, search call, search result, B] -> assistant [A, call], tool [result], assistant [B]."""
    turns, parts = [], []
    for p in msg["content"]:
        kind = p.get("type") if isinstance(p, dict) else None
        if kind == "tool_search_result":
            continue
        if kind == "server_tool_call":
            result = results.get(p.get("id"))
            if result is None:
                continue  # a search with no result (an interrupted turn): nothing the model can use
            parts.append({"type": "tool_call", "id": p.get("id"), "name": proxy_name or p.get("name"),
                          "arguments": p.get("arguments") or "{}"})
            turns.append({**msg, "content": parts})
            turns.append({"role": "tool", "content": [{"type": "tool_result", "call_id": p.get("id"),
                                                       "content": [{"type": "text", "text": result_text(result, tables)}]}]})
            parts = []
            continue
        parts.append(p)
    if parts:
        turns.append({**msg, "content": parts})
    return turns


def result_text(result: dict, tables) -> str:
    """What the provider's model reads as a search's result."""
    if result.get("error"):
        return f"{setting(tables, 'error') or 'The search failed: '}{result.get('message') or result['error']}"
    names = [n for n in result.get("tool_names") or () if isinstance(n, str)]
    if not names:
        return setting(tables, "none_found") or "No tools matched."
    return f"{setting(tables, 'found') or 'Tools loaded: '}{', '.join(names)}"


# --- the search -----------------------------------------------------------------------


class SearchError(Exception):
    """The model's search input is unusable: Anthropic's ``invalid_tool_input``."""

    code = "invalid_tool_input"


def search(variant: str, arguments: dict, catalog: list, tables) -> list[str]:
    """The names of the catalog's tools the search finds, best first, at most the
    model's ``limit`` (default and ceiling from the settings table)."""
    default = int(setting(tables, "default_results") or 5)
    ceiling = int(setting(tables, "max_results") or 10)
    limit = arguments.get("limit")
    limit = min(limit, ceiling) if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else default
    if variant == "names":
        return name_search(arguments.get("queries", arguments.get("paths")), catalog, limit,
                           float(setting(tables, "bm25_k1") or 1.2), float(setting(tables, "bm25_b") or 0.75))
    if variant == "regex":
        return regex_search(arguments.get("pattern", arguments.get("query")), catalog, limit,
                            int(setting(tables, "max_pattern_length") or 200))
    return bm25_search(arguments.get("query", arguments.get("pattern")), catalog, limit,
                       float(setting(tables, "bm25_k1") or 1.2), float(setting(tables, "bm25_b") or 0.75))


def searchable(tool: dict) -> list[str]:
    """What a search reads of a tool, as Anthropic's does: its name, its description,
    and its parameters' names and descriptions."""
    out = [str(tool.get("name") or ""), str(tool.get("description") or "")]
    props = (tool.get("parameters") or {}).get("properties") if isinstance(tool.get("parameters"), dict) else None
    if isinstance(props, dict):
        for name, schema in props.items():
            out.append(str(name))
            if isinstance(schema, dict) and isinstance(schema.get("description"), str):
                out.append(schema["description"])
    return out


def name_search(queries, catalog: list, limit: int, k1: float, b: float) -> list[str]:
    """OpenAI's tool search: each query (its ``queries``, or the older ``paths``) that names
    a namespace loads the namespace's deferred tools, one that names a tool (flattened, or
    ``namespace.tool``) that tool; any other query is ranked by BM25 as a description of
    what is wanted. Found tools in the order found, each once."""
    if isinstance(queries, str):
        queries = [queries]
    if not isinstance(queries, list) or not queries or not all(isinstance(q, str) and q.strip() for q in queries):
        raise SearchError("queries must be a non-empty list of namespace or tool names, or descriptions")
    found: list = []
    for query in queries:
        named = [t["name"] for t in catalog
                 if query in (t.get("name"), t.get("namespace"), f"{t.get('namespace')}.{t.get('short_name')}")]
        for name in named or bm25_search(query, catalog, limit, k1, b):
            if name not in found:
                found.append(name)
    return found


def regex_search(pattern, catalog: list, limit: int, max_length: int) -> list[str]:
    if not isinstance(pattern, str) or not pattern or len(pattern) > max_length:
        raise SearchError(f"pattern must be a regular expression of 1 to {max_length} characters")
    try:
        compiled = re.compile(pattern)
    except re.error as err:
        raise SearchError(f"pattern is not a valid regular expression ({err})") from None
    found = [t["name"] for t in catalog if any(compiled.search(text) for text in searchable(t))]
    return found[:limit]


def words(text: str) -> list[str]:
    """Lower-case terms; snake_case, kebab-case and camelCase names split into words."""
    return [w.lower() for w in _WORD.findall(text)]


def bm25_search(query, catalog: list, limit: int, k1: float, b: float) -> list[str]:
    if not isinstance(query, str) or not query.strip():
        raise SearchError("query must be a non-empty text")
    docs = [words(" ".join(searchable(t))) for t in catalog]
    if not docs:
        return []
    avg = sum(map(len, docs)) / len(docs) or 1.0
    frequency: dict = {}
    for doc in docs:
        for term in set(doc):
            frequency[term] = frequency.get(term, 0) + 1
    terms = set(words(query))
    scored = []
    for i, doc in enumerate(docs):
        score = 0.0
        for term in terms:
            tf = doc.count(term)
            if not tf:
                continue
            n = frequency[term]
            idf = math.log(1 + (len(docs) - n + 0.5) / (n + 0.5))
            score += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(doc) / avg))
        if score > 0:
            scored.append((-score, i))
    return [catalog[i]["name"] for _, i in sorted(scored)[:limit]]


def run(server_tool: dict, arguments_text: str | None, tables) -> dict:
    """One search the proxy runs for the model: the IR ``tool_search_result`` fields
    (``tool_names``, or ``error`` with Anthropic's error code)."""
    try:
        arguments = orjson.loads(arguments_text or "{}")
    except orjson.JSONDecodeError:
        arguments = None
    if not isinstance(arguments, dict):
        return {"tool_names": [], "error": SearchError.code, "message": "the search input is not a JSON object"}
    try:
        return {"tool_names": search(server_tool["search"], arguments, server_tool["catalog"], tables)}
    except SearchError as err:
        return {"tool_names": [], "error": err.code, "message": str(err)}
