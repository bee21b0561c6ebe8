"""Config of pools and fallbacks: what is accepted, every mistake named by its path, and
`check-config` showing the resolved pools (fingerprints, never keys)."""

from __future__ import annotations

import pytest
import yaml

from proxai.tools import cli
from proxai.routing.config import load_dict
from proxai.http.errors import ConfigError
from proxai.routing.pools import fingerprint


def doc(**routes) -> dict:
    return {
        "providers": {
            "a": {"protocol": "openai_chat_completions", "base_url": "http://127.0.0.1:1/v1", "api_keys": ["ka-SECRET", "kb-SECRET"]},
            "b": {"protocol": "anthropic_messages", "base_url": "http://127.0.0.1:2", "api_key": "kc-SECRET"},
            "c": {"protocol": "openai_responses", "base_url": "http://127.0.0.1:3/v1",
                  "api_keys": [{"key": "kd-SECRET", "weight": 3}, "ke-SECRET"], "strategy": "weighted"},
        },
        "routing": {"routes": [dict({"name": "r", "model_pattern": "m", "provider": "a"}, **routes)]},
    }


def problems(d: dict) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load_dict(d, {})
    return info.value.problems


def test_pools_and_fallbacks_load():
    cfg = load_dict(doc(fallbacks=["b", {"provider": "c", "upstream_model": "gpt-x"}]), {})
    a, c = cfg.providers["a"], cfg.providers["c"]
    assert a.api_keys == ("ka-SECRET", "kb-SECRET") and a.api_key == "ka-SECRET" and a.strategy == "round_robin"
    assert c.key_weights == (3.0, 1.0) and c.strategy == "weighted"
    assert [(f.provider, f.upstream_model) for f in cfg.routes[0].fallbacks] == [("b", None), ("c", "gpt-x")]
    assert cfg.providers["b"].api_keys == ("kc-SECRET",)


def test_unknown_provider_in_fallbacks():
    assert ("routing.routes[0].fallbacks[1]", "unknown provider 'nope'") in problems(doc(fallbacks=["b", "nope"]))


def test_a_cycle_in_the_chain():
    found = problems(doc(fallbacks=["b", "a"]))
    assert found[0][0] == "routing.routes[0].fallbacks[1]" and "a cycle" in found[0][1] and "a -> b" in found[0][1]
    assert problems(doc(fallbacks=["b", "b"]))[0][0] == "routing.routes[0].fallbacks[1]"


def test_an_empty_pool():
    d = doc()
    d["providers"]["a"]["api_keys"] = []
    assert ("providers.a.api_keys", "an empty pool: list at least one key") in problems(d)


def test_neither_or_both_key_forms():
    d = doc()
    del d["providers"]["b"]["api_key"]
    assert problems(d)[0][0] == "providers.b.api_key"
    d = doc()
    d["providers"]["b"]["api_keys"] = ["x"]
    assert ("providers.b.api_keys", "give api_key or api_keys, not both") in problems(d)


def test_a_duplicate_key_and_a_bad_strategy_never_echo_the_key():
    d = doc()
    d["providers"]["a"]["api_keys"] = ["ka-SECRET", "ka-SECRET"]
    d["providers"]["c"]["strategy"] = "random"
    d["providers"]["c"]["api_keys"][1] = 42
    found = problems(d)
    paths = [p for p, _ in found]
    assert "providers.c.strategy" in paths and "providers.c.api_keys[1]" in paths
    assert not any("SECRET" in m for _, m in found)
    d["providers"]["c"]["api_keys"][1] = "ke-SECRET"
    d["providers"]["c"]["strategy"] = "weighted"
    assert ("providers.a.api_keys", "the same key is listed twice") in problems(d)


def test_resilience_settings_are_validated():
    d = doc()
    d["resilience"] = {"max_attempts": 0, "breaker": {"open_secs": -1, "oops": 1}}
    paths = [p for p, _ in problems(d)]
    assert {"resilience.max_attempts", "resilience.breaker.open_secs", "resilience.breaker.oops"} <= set(paths)


def test_existing_single_key_configs_still_load():
    d = doc()
    d["providers"]["a"] = {"protocol": "openai_chat_completions", "base_url": "http://127.0.0.1:1/v1", "api_key": ""}
    assert load_dict(d, {}).providers["a"].api_keys == ("",)


def test_check_config_shows_the_resolved_pools(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc(fallbacks=["b", {"provider": "c", "upstream_model": "gpt-x"}])))
    assert cli.main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert f"provider a: openai_chat_completions, 2 key(s), round_robin: {fingerprint('ka-SECRET')}, {fingerprint('kb-SECRET')}" in out
    assert f"{fingerprint('kd-SECRET')} (weight 3)" in out
    assert "route r: a -> b -> c (model gpt-x)" in out
    assert "SECRET" not in out
