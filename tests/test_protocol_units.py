"""A protocol is one unit: its facts are in rules/<protocol>/, and the server asks the
engine for them. No module of proxai/ (nor server.py) compares a protocol id; the
registry (proxai/protocols.py) is the one module that names the ids, and no Python
module or schema lists the protocols (the list is the rules folders with a protocol.yaml)."""
from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REGISTRY = ROOT / "proxai" / "protocols.py"


def protocol_ids() -> list[str]:
    return sorted(p.parent.name for p in (ROOT / "rules").glob("*/protocol.yaml"))


def registry_names() -> list[str]:
    """The constants the registry binds to protocol ids (CHAT, GEMINI ...)."""
    return re.findall(r'^([A-Z][A-Z0-9_]*)\s*=\s*["\'][a-z0-9_]+["\']', REGISTRY.read_text(), re.M)


def comparisons(text: str, ids: list[str], names: list[str]) -> list[tuple[int, str]]:
    """Lines of `text` that compare something with a protocol id: a registry constant or
    the id's string literal, on either side of ==, != or in."""
    literal = "|".join(map(re.escape, ids))
    const = "|".join(map(re.escape, names))
    patterns = [
        rf"(==|!=|\bin)\s*[(\[{{]?\s*\b({const})\b",                  # x == GEMINI, x in (CHAT, ...)
        rf"\b({const})\b\s*(==|!=)",                                  # GEMINI == x
        rf"(==|!=|\bin)\s*[(\[{{]?\s*[\"']({literal})[\"']",           # x == "anthropic_messages"
        rf"[\"']({literal})[\"']\s*(==|!=|\bin\b)",                    # "anthropic_messages" == x
    ]
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if any(re.search(p, code) for p in patterns):
            found.append((number, line.strip()))
    return found


def python_files():
    yield ROOT / "server.py"
    yield from sorted((ROOT / "proxai").rglob("*.py"))


def test_the_scanner_finds_what_it_must():
    ids, names = ["anthropic_messages", "gemini_generate_content"], ["ANTHROPIC", "GEMINI"]
    caught = [
        "if provider.protocol == GEMINI:",
        "if protocol != ANTHROPIC:",
        "elif p.protocol in (ANTHROPIC, GEMINI):",
        'if ctx.client_protocol == "anthropic_messages":',
        "x = 1 if GEMINI == protocol else 2",
        "if protocol in {'gemini_generate_content'}:",
    ]
    passed = [
        'if target.provider.protocol == info["client_protocol"]:',
        'stateful = self.engine.wire.has(protocol, "stored_responses")',
        "RENDERERS = {ANTHROPIC: render_anthropic, GEMINI: render_gemini}",
        "# a comment: protocol == GEMINI",
    ]
    assert [n for n, _ in comparisons("\n".join(caught), ids, names)] == list(range(1, len(caught) + 1))
    assert comparisons("\n".join(passed), ids, names) == []


def test_no_protocol_id_comparison_outside_the_registry():
    ids, names = protocol_ids(), registry_names()
    assert ids and names, "the rules name no protocol, or the registry no constant"
    found = []
    for path in python_files():
        if path == REGISTRY:
            continue
        found += [f"{path.relative_to(ROOT)}:{n}: {line}" for n, line in comparisons(path.read_text(), ids, names)]
    assert not found, "protocol-id comparisons (ask the engine's descriptors instead):\n" + "\n".join(found)


def test_no_module_or_schema_lists_the_protocols():
    """Two protocol ids as string literals on one line is a list of protocols (a tuple, an
    enum); the list is the rules folders. (engine/hooks/ is the rules' own Python, per
    protocol, and may name them.)"""
    ids = protocol_ids()
    literal = re.compile("[\"'](" + "|".join(map(re.escape, ids)) + ")[\"']")
    found = []
    for path in [*python_files(), *sorted((ROOT / "engine").glob("*.py"))]:
        if path == REGISTRY:
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if len(set(literal.findall(line))) >= 2:
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    for schema in sorted((ROOT / "schemas").glob("*.json")):
        def walk(node, where):
            if isinstance(node, dict):
                for key, value in node.items():
                    if key == "enum" and isinstance(value, list) and len(set(value) & set(ids)) >= 2:
                        found.append(f"{schema.relative_to(ROOT)}: {where}/enum lists protocols")
                    if key == "properties" and isinstance(value, dict) and len(set(value) & set(ids)) >= 2:
                        found.append(f"{schema.relative_to(ROOT)}: {where}/properties lists protocols")
                    walk(value, f"{where}/{key}")
            elif isinstance(node, list):
                for i, value in enumerate(node):
                    walk(value, f"{where}/{i}")
        walk(json.loads(schema.read_text()), "")
    assert not found, "lists of protocols outside the rules:\n" + "\n".join(found)


def test_the_protocols_are_the_rules_folders():
    from proxai import protocols

    assert sorted(protocols.names()) == protocol_ids()


def test_a_config_names_only_protocols_of_the_rules():
    import pytest

    from proxai.routing.config import ConfigError, load_dict

    doc = {"providers": {"p": {"protocol": "anthropic_message", "base_url": "http://x", "api_key": "k"}}}
    with pytest.raises(ConfigError) as err:
        load_dict(doc, {})
    (problem,) = [p for p in err.value.problems if p[0] == "providers.p.protocol"]
    assert "must be one of: openai_chat_completions, openai_responses, anthropic_messages" in problem[1]
    assert "anthropic_messages" in (getattr(problem, "hint", None) or "")
    # A rules_dir that adds a protocol folder makes it a protocol a provider may speak.
    toy = {"providers": {"p": {"protocol": "toy_chat", "base_url": "http://x", "api_key": "k"}},
           "routing": {"default_providers": {"toy_chat": "p"}}}
    with pytest.raises(ConfigError):
        load_dict(dict(toy), {})
    cfg = load_dict({**toy, "rules_dir": str(ROOT / "tests" / "fixtures" / "protocols")}, {})
    assert cfg.providers["p"].protocol == "toy_chat"


def test_provider_options_are_valid_where_the_descriptors_say():
    from proxai.routing.config import ConfigError, load_dict

    def problems(protocol, **option):
        try:
            load_dict({"providers": {"p": {"protocol": protocol, "base_url": "http://x", "api_key": "k", **option}}}, {})
        except ConfigError as err:
            return [p[1] for p in err.problems]
        return []

    assert problems("gemini_generate_content", thinking_mode="budget") == []
    assert problems("openai_responses", thinking_mode="budget") == [
        "only valid for anthropic_messages or gemini_generate_content providers"]
    assert problems("anthropic_messages", max_tokens_field="max_tokens") == ["only valid for openai_chat_completions providers"]
    assert problems("openai_chat_completions", auth="bearer") == ["only valid for anthropic_messages providers"]
