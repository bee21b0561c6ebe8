"""Every item of the recorded corpus (tests/corpus: real requests, responses and streams
of the three APIs) translated toward the two other protocols: its meaning is kept (text,
tool calls and arguments, reasoning and its opaque state, stop reason class, usage), or it
is refused for a reason listed, reviewed, in tests/corpus_rejections.yaml."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

import corpus_meaning as M
import engine
from proxai.http.sse import SSEParser

HERE = Path(__file__).parent
CORPUS = HERE / "corpus"
REJECTIONS = yaml.safe_load((HERE / "corpus_rejections.yaml").read_text())
PROTOCOLS = (M.CHAT, M.RESPONSES, M.ANTHROPIC)
ITEMS = sorted(str(p.relative_to(CORPUS)) for p in CORPUS.glob("*/*/*/*") if p.suffix in (".json", ".sse"))
_ENGINE = engine.Engine.load()
# The function tools the proxy declares in place of a client's tool search (rules/tables/tool_search.yaml).
_SEARCH_TABLE = next(t for t in yaml.safe_load((HERE.parent / "rules/tables/tool_search.yaml").read_text())["tables"]
                     if t["name"] == "tool_search.search->tool")
SEARCH_TOOLS = {spec["name"] for spec in _SEARCH_TABLE["map"].values()}


class Refused(Exception):
    pass


def translate(item: str, target: str):
    """(source meaning, target meaning) of one item translated toward `target`; Refused
    when the translation refuses it."""
    path = CORPUS / item
    source, kind = path.parts[-3], path.parts[-2]
    if kind == "request":
        ctx = engine.Context(client_protocol=source, provider_protocol=target, provider_name="p")
        body = json.loads(path.read_text())
        try:
            out = _ENGINE.translate_request(ctx, body)
        except engine.TranslationError as err:
            raise Refused(err.message) from err
        return M.request(source, body), M.request(target, out)
    # Toward a client: ask for usage in Chat streams as clients that want it do.
    ctx = engine.Context(client_protocol=target, provider_protocol=source, provider_name="p",
                         client_body={"stream_options": {"include_usage": True}})
    if kind == "response":
        body = json.loads(path.read_text())
        try:
            out = _ENGINE.translate_response(ctx, body)
        except engine.TranslationError as err:
            raise Refused(err.message) from err
        return M.response(source, body), M.response(target, out)
    raw = path.read_bytes()
    translator = _ENGINE.open_stream(ctx)
    wire = []
    for event in SSEParser().feed(raw):
        wire += translator.feed(event)
    wire += translator.eof()
    before, after = M.stream(source, raw), M.stream(target, b"".join(wire))
    if after.error is not None and before.error is None:
        raise Refused(after.error)
    return before, after


def differences(kind: str, src, dst) -> list[str]:
    if kind == "request":
        out = []
        target_text = M.norm("".join(dst.texts))
        lost = [t for t in src.texts if M.norm(t) not in target_text]
        if lost:
            out.append(f"text lost: {lost[0][:80]!r}")
        # Tool search emulated (docs/tool-search.md): the proxy's search tool is declared,
        # deferred tools no search loaded are not, and the history's searches are calls
        # of the search tool and their results.
        sent = [t for t in dst.tools if t not in SEARCH_TOOLS]
        if src.tools != dst.tools and not (set(sent) <= set(src.tools) and set(src.tools) - set(sent) <= src.deferred):
            out.append(f"tools {src.tools} -> {dst.tools}")
        calls = [c for c in dst.calls if c[0] not in SEARCH_TOOLS]
        if src.calls != calls:
            out.append(f"tool calls {src.calls} -> {dst.calls}")
        if src.results != dst.results - (len(dst.calls) - len(calls)):
            out.append(f"tool results {src.results} -> {dst.results}")
        return out
    if src.error is not None:
        return [] if dst.error and M.norm(src.error) in M.norm(dst.error) else [f"error {src.error!r} -> {dst.error!r}"]
    out = []
    if M.norm(src.text) != M.norm(dst.text):
        out.append(f"text {src.text[:60]!r} -> {dst.text[:60]!r}")
    if src.calls != dst.calls:
        out.append(f"tool calls {src.calls} -> {dst.calls}")
    if M.norm(src.reasoning) not in M.norm(dst.reasoning):
        out.append("reasoning text lost")
    if src.opaque and not dst.opaque:
        out.append("reasoning state (signature / encrypted content) lost")
    if src.stop != dst.stop:
        out.append(f"stop {src.stop} -> {dst.stop}")
    if src.usage is not None and src.usage != dst.usage:
        out.append(f"usage {src.usage} -> {dst.usage}")
    return out


def refusals():
    """(item, target, message) of every refusal: what a new corpus_rejections.yaml entry is made from."""
    for item in ITEMS:
        source = Path(item).parts[1]
        for target in PROTOCOLS:
            if target == source:
                continue
            try:
                translate(item, target)
            except Refused as err:
                yield item, target, str(err)


@pytest.mark.parametrize("item", ITEMS)
def test_corpus_item_keeps_its_meaning_or_is_refused_for_a_listed_reason(item):
    source, kind = Path(item).parts[1], Path(item).parts[2]
    listed = (REJECTIONS["items"] or {}).get(item) or {}
    problems = []
    for target in PROTOCOLS:
        if target == source:
            continue
        reason = listed.get(target)
        try:
            src, dst = translate(item, target)
        except Refused as err:
            if reason is None:
                problems.append(f"-> {target}: refused, and not listed in corpus_rejections.yaml: {err}")
            elif not re.search(REJECTIONS["reasons"][reason]["message"], str(err)):
                problems.append(f"-> {target}: refused for another reason than {reason!r}: {err}")
            continue
        if reason is not None:
            problems.append(f"-> {target}: listed as refused ({reason}) but translates: remove the entry")
        problems += [f"-> {target}: {d}" for d in differences(kind, src, dst)]
    assert not problems, "\n".join(problems)


def test_rejection_list_is_well_formed():
    reasons = REJECTIONS["reasons"]
    for name, reason in reasons.items():
        assert reason["why"].strip() and re.compile(reason["message"]), name
    for item, targets in REJECTIONS["items"].items():
        assert item in ITEMS, f"{item} is not in the corpus"
        source = Path(item).parts[1]
        for target, reason in targets.items():
            assert target in PROTOCOLS and target != source, (item, target)
            assert reason in reasons, (item, reason)


def test_the_oracle_sees_meaning_changes():
    """The meaning comparison is not vacuous: a dropped call, changed text or lost usage is caught."""
    item = "llm/openai_chat_completions/stream/test_tool_use_basic.0.sse"
    src, dst = translate(item, M.ANTHROPIC)
    assert src.calls and not differences("stream", src, dst)
    dst.calls = []
    dst.usage = (0, 0)
    found = differences("stream", src, dst)
    assert any("tool calls" in d for d in found) and any("usage" in d for d in found)
    req_src, req_dst = translate("llm/openai_chat_completions/request/test_tool_use_basic.1.json", M.ANTHROPIC)
    assert req_src.texts and not differences("request", req_src, req_dst)
    req_dst.texts = []
    assert differences("request", req_src, req_dst)


if __name__ == "__main__":
    # `python tests/test_corpus_fidelity.py`: the refusals as corpus_rejections.yaml `items`
    # lines, each with the first reason whose pattern matches (or UNDECIDED), to review.
    found: dict = {}
    for item, target, message in refusals():
        reason = next((name for name, r in REJECTIONS["reasons"].items() if re.search(r["message"], message)), None)
        found.setdefault(item, {})[target] = reason or f"UNDECIDED  # {message}"
    for item in sorted(found):
        print(f"  {item}: {{{', '.join(f'{t}: {r}' for t, r in sorted(found[item].items()))}}}")
