"""Load balancing over a route's several `providers`: the config (accepted forms, every
mistake named by its path, `check-config`), and each strategy end to end with the official
SDKs against mock deployments, checking what every deployment received."""

from __future__ import annotations

import itertools
import logging
import time
from concurrent.futures import ThreadPoolExecutor

import anthropic
import openai
import pytest
import yaml

from conftest import shared_state

from proxai.tools import cli
from proxai.routing.config import load_dict
from proxai.http.errors import ConfigError
from proxai.mock import Error, Text, Turn
from test_resilience_e2e import ANTHROPIC, CHAT, RESPONSES, chat, key_of, metric, provider, upstreams  # noqa: F401

# --- config ------------------------------------------------------------------------------


def doc(**route) -> dict:
    def chat_provider(port: int, key: str) -> dict:
        return {"protocol": CHAT, "base_url": f"http://127.0.0.1:{port}/v1", "api_key": key}

    route = dict({"name": "r", "model_pattern": "m", "providers": ["a", "b"]}, **route)
    return {"providers": {"a": chat_provider(1, "ka-SECRET"), "b": chat_provider(2, "kb-SECRET"),
                          "c": chat_provider(3, "kc-SECRET")},
            "routing": {"routes": [route]}}


def problems(d: dict) -> list[tuple[str, str]]:
    with pytest.raises(ConfigError) as info:
        load_dict(d, {})
    return info.value.problems


def test_balanced_providers_load():
    cfg = load_dict(doc(providers=["a", {"provider": "b", "weight": 3, "upstream_model": "b-model"}],
                        strategy="weighted", fallbacks=["c"]), {})
    route = cfg.routes[0]
    assert route.provider == "a"  # the first: what model listing and token counting use
    assert route.strategy == "weighted"
    assert [(d.provider, d.weight, d.upstream_model) for d in route.providers] == [("a", 1.0, None), ("b", 3.0, "b-model")]
    assert [f.provider for f in route.fallbacks] == ["c"]
    assert load_dict(doc(), {}).routes[0].strategy == "round_robin"


def test_a_plain_provider_route_is_unchanged():
    d = doc()
    d["routing"]["routes"][0] = {"name": "r", "model_pattern": "m", "provider": "a", "fallbacks": ["b"]}
    route = load_dict(d, {}).routes[0]
    assert (route.provider, route.providers, route.strategy) == ("a", (), "round_robin")


@pytest.mark.parametrize("route, path, message", [
    ({"providers": ["a", "nope"]}, "routing.routes[0].providers[1]", "unknown provider 'nope'"),
    ({"providers": []}, "routing.routes[0].providers", "an empty list: name at least one provider"),
    ({"providers": ["a", "a"]}, "routing.routes[0].providers[1]", "provider 'a' is listed twice"),
    ({"provider": "a"}, "routing.routes[0].providers", "give provider or providers, not both"),
    ({"providers": ["a", "b"], "fallbacks": ["c", "b"]}, "routing.routes[0].fallbacks[1]",
     "provider 'b' is already one of this route's providers (a, b); fallbacks are tried after all of them"),
])
def test_mistakes_are_named_by_their_path(route, path, message):
    assert (path, message) in problems(doc(**route))


@pytest.mark.parametrize("weight", [0, -1])
def test_a_weight_must_be_positive(weight):
    found = problems(doc(providers=["a", {"provider": "b", "weight": weight}], strategy="weighted"))
    assert [p for p, _ in found] == ["routing.routes[0].providers[1].weight"]


def test_neither_provider_nor_providers():
    d = doc()
    del d["routing"]["routes"][0]["providers"]
    assert ("routing.routes[0].provider", "required key is missing") in problems(d)


def test_strategy_needs_providers_and_a_known_name():
    d = doc(strategy="sticky")
    d["routing"]["routes"][0] = {"model_pattern": "m", "provider": "a", "strategy": "sticky"}
    assert problems(d)[0][0] == "routing.routes[0].strategy"
    assert problems(doc(strategy="random"))[0][0] == "routing.routes[0].strategy"
    assert problems(doc(providers=["a", {"provider": "b", "oops": 1}]))[0][0] == "routing.routes[0].providers[1].oops"


def test_check_config_shows_the_balanced_route(tmp_path, capsys):
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(doc(providers=[{"provider": "a", "weight": 3}, {"provider": "b", "upstream_model": "x"}],
                                       strategy="weighted", fallbacks=["c"])))
    assert cli.main(["check-config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "route r: a (weight 3) | b (weight 1) (model x) [weighted] -> c" in out
    assert "SECRET" not in out


# --- end to end -----------------------------------------------------------------------------

KEYS = {"a": "sk-dep-a-SECRET", "b": "sk-dep-b-SECRET", "c": "sk-dep-c-SECRET"}


def balanced(ups: dict, strategy: str | None = None, deployments=None, fallbacks=(), protocols=None, **top) -> dict:
    protocols = protocols or {}
    providers = {name: provider(protocols.get(name, CHAT), up.url, key=KEYS.get(name, f"sk-{name}-SECRET"),
                                max_tokens_default=256) if protocols.get(name) == ANTHROPIC
                 else provider(protocols.get(name, CHAT), up.url, key=KEYS.get(name, f"sk-{name}-SECRET"))
                 for name, up in ups.items()}
    route = {"name": "lb", "model_pattern": "m", "upstream_model": "up-model",
             "providers": deployments or [n for n in ups if n not in fallbacks]}
    if strategy:
        route["strategy"] = strategy
    if fallbacks:
        route["fallbacks"] = list(fallbacks)
    return {"providers": providers, "routing": {"routes": [route]}, "state": {"backend": "memory"}, **top}


def served_by(ups: dict) -> list[str]:
    """Which deployment each upstream request went to, in arrival order."""
    arrivals = sorted(((r, name) for name, up in ups.items() for r in up.requests), key=lambda x: x[0].seq)
    return [name for _, name in arrivals]


class _Numbered(list):
    """A mock's request list that stamps each record with a number shared by all the mocks."""

    def __init__(self, counter):
        super().__init__()
        self.counter = counter

    def append(self, record):
        record.seq = next(self.counter)
        super().append(record)


@pytest.fixture
def deployments(upstreams):
    """Named mock deployments, whose requests can be put in arrival order (served_by)."""
    counter = itertools.count()

    def make(*names: str) -> dict:
        out = {}
        for name in names:
            out[name] = up = upstreams()
            up.requests = _Numbered(counter)
        return out

    return make


def test_round_robin_takes_the_deployments_in_turn(start_proxy, deployments, caplog):
    ups = deployments("a", "b", "c")
    p = start_proxy(balanced(ups))
    with caplog.at_level(logging.INFO, logger="proxai.request"):
        for _ in range(6):
            assert chat(p).choices[0].message.content.startswith("Hello from the ProxAI demo")
    assert served_by(ups) == ["a", "b", "c"] * 2
    assert all(key_of(r) == KEYS[name] for name, up in ups.items() for r in up.requests)
    logged = [r.fields["provider"] for r in caplog.records if getattr(r, "fields", None)]
    assert logged == ["a", "b", "c"] * 2  # the log line names the deployment that served


def test_weighted_follows_the_weights_exactly(start_proxy, deployments):
    """Smooth weighted round robin: weights 3 and 1 give 3 of every 4, interleaved."""
    ups = deployments("a", "b")
    p = start_proxy(balanced(ups, "weighted", [{"provider": "a", "weight": 3}, {"provider": "b", "weight": 1}]))
    client = p.anthropic()
    for _ in range(8):
        client.messages.create(model="m", max_tokens=32, messages=[{"role": "user", "content": "hi"}])
    assert served_by(ups) == ["a", "a", "b", "a"] * 2


def test_each_deployment_gets_its_own_upstream_model_and_protocol(start_proxy, deployments):
    """A deployment of another protocol is translated like any other pair."""
    ups = deployments("chat", "ant")
    p = start_proxy(balanced(ups, deployments=["chat", {"provider": "ant", "upstream_model": "claude-x"}],
                             protocols={"ant": ANTHROPIC}))
    ups["ant"].enqueue(Turn([Text("from anthropic")]))
    ups["chat"].enqueue(Turn([Text("from chat")]))
    answers = [chat(p).choices[0].message.content for _ in range(2)]
    assert answers == ["from chat", "from anthropic"]
    assert [(r.path, r.body["model"]) for r in ups["chat"].requests] == [("/v1/chat/completions", "up-model")]
    assert [(r.path, r.body["model"]) for r in ups["ant"].requests] == [("/v1/messages", "claude-x")]


@pytest.mark.slow  # waits out a slow answer
def test_least_in_flight_sends_new_requests_past_a_slow_one(harness, start_proxy, deployments):
    """While a slow request holds deployment a, every new request goes to b (round robin
    would send every other one to a)."""
    ups = deployments("a", "b")
    p = start_proxy(balanced(ups, "least_in_flight"))
    ups["a"].enqueue(Turn([Text("slow", chunks=["s", "l", "o", "w"])], delay_secs=0.4))
    with ThreadPoolExecutor(1) as pool:
        slow = pool.submit(chat, p)
        for _ in range(200):
            if ups["a"].requests:
                break
            time.sleep(0.01)
        assert len(ups["a"].requests) == 1
        fast = [chat(p).choices[0].message.content for _ in range(4)]
        assert not slow.done(), "the slow request must still be running"  # else the test proves nothing
        assert slow.result().choices[0].message.content == "slow"
    assert all(text.startswith("Hello from the ProxAI demo") for text in fast)
    assert served_by(ups) == ["a", "b", "b", "b", "b"]
    assert p.proxy.resilience.pools.pools["a"].in_flight == 0  # every attempt gave its slot back


def test_sticky_keeps_each_conversation_on_one_deployment(start_proxy, deployments):
    ups = deployments("a", "b", "c")
    p = start_proxy(balanced(ups, "sticky"))
    homes: dict[str, set] = {}
    for conv in [f"conv-{i}" for i in range(8)]:
        for _ in range(3):
            chat(p, prompt_cache_key=conv)
            homes.setdefault(conv, set()).add(served_by(ups)[-1])
    assert all(len(h) == 1 for h in homes.values())
    assert len(set().union(*homes.values())) > 1  # conversations spread over the deployments


def test_sticky_follows_the_claude_code_session(start_proxy, deployments):
    ups = deployments("a", "b", "c")
    p = start_proxy(balanced(ups, "sticky", protocols=dict.fromkeys(ups, ANTHROPIC)))
    client = p.anthropic()
    homes: dict[str, set] = {}
    for i in range(6):
        session = f"0b6b2f4e-{i:04d}-4c1e-9d52-00000000000{i}"
        for turn in range(3):
            client.messages.create(model="m", max_tokens=32, messages=[{"role": "user", "content": f"turn {turn}"}],
                                   metadata={"user_id": f"user_abc_account_def_session_{session}"})
            homes.setdefault(session, set()).add(served_by(ups)[-1])
    assert all(len(h) == 1 for h in homes.values())
    assert len(set().union(*homes.values())) > 1


@pytest.mark.parametrize("protocol", [RESPONSES, CHAT])
def test_sticky_keeps_a_previous_response_id_chain_on_one_deployment(start_proxy, deployments, protocol):
    """No prompt_cache_key: every turn of a chain goes to the deployment of its first turn
    (passthrough to Responses deployments, or translated to Chat ones with the proxy's store)."""
    ups = deployments("a", "b", "c")
    p = start_proxy(balanced(ups, "sticky", protocols=dict.fromkeys(ups, protocol)))
    client = p.openai()
    firsts = set()
    for chain in range(3):
        prev, homes = None, set()
        for _ in range(3):
            kw = {"previous_response_id": prev} if prev else {}
            prev = client.responses.create(model="m", input="hi", **kw).id
            homes.add(served_by(ups)[-1])
        assert len(homes) == 1, f"chain {chain} went to {homes}"
        firsts |= homes
    assert len(firsts) > 1  # first turns (no conversation yet) go round robin


def test_a_breaker_open_deployment_is_skipped(start_proxy, deployments):
    ups = deployments("a", "b")
    p = start_proxy(balanced(ups, "weighted", [{"provider": "a", "weight": 10}, {"provider": "b", "weight": 1}],
                             resilience={"sync_secs": 0, "breaker": {"failures": 1, "window_secs": 30, "open_secs": 30}}))
    ups["a"].enqueue(Error(503, message="down"))
    chat(p)  # a fails before the first byte: b serves, a's breaker opens
    assert served_by(ups) == ["a", "b"]
    assert metric(p, "proxai_breaker_state", provider="a") == 2
    for _ in range(5):
        chat(p)
    assert served_by(ups) == ["a"] + ["b"] * 6  # a, the heavier, is left out while open


def test_a_failing_deployment_falls_over_to_the_others_then_the_fallbacks(start_proxy, deployments, caplog):
    ups = deployments("a", "b", "spare")
    p = start_proxy(balanced(ups, fallbacks=["spare"], protocols={"spare": RESPONSES}))
    ups["a"].enqueue(Error(503, message="down"))
    ups["b"].enqueue(Error(500, message="down too"))
    ups["spare"].enqueue(Turn([Text("the fallback served")]))
    with caplog.at_level(logging.INFO, logger="proxai.request"):
        assert chat(p).choices[0].message.content == "the fallback served"
    assert served_by(ups) == ["a", "b", "spare"]
    fields = [r.fields for r in caplog.records if getattr(r, "fields", None)][-1]
    assert (fields["provider"], fields["attempts"]) == ("spare", 3)


def test_max_attempts_bounds_the_fall_over(start_proxy, deployments):
    ups = deployments("a", "b", "c")
    p = start_proxy(balanced(ups, resilience={"max_attempts": 2}))
    for up in ups.values():
        up.enqueue(Error(503, message="down"))
    with pytest.raises(openai.InternalServerError):
        chat(p)
    assert served_by(ups) == ["a", "b"]


def test_a_balanced_stream_failing_after_its_first_event_is_not_retried(start_proxy, deployments):
    ups = deployments("a", "b")
    p = start_proxy(balanced(ups))
    ups["a"].enqueue(Turn([Text("partial answer", chunks=["partial ", "answer"])], cut_after=2))
    text, error = "", None
    try:
        for chunk in chat(p, stream=True):
            if chunk.choices and chunk.choices[0].delta.content:
                text += chunk.choices[0].delta.content
    except openai.APIError as exc:
        error = exc
    assert text == "partial " and error is not None
    assert served_by(ups) == ["a"]  # b never saw it


def test_an_anthropic_client_over_balanced_anthropic_deployments(start_proxy, deployments):
    ups = deployments("a", "b")
    p = start_proxy(balanced(ups, protocols=dict.fromkeys(ups, ANTHROPIC)))
    ups["a"].enqueue(Error(529, message="overloaded"))
    msg = p.anthropic().messages.create(model="m", max_tokens=32, messages=[{"role": "user", "content": "hi"}])
    assert msg.content[0].text.startswith("Hello from the ProxAI demo")
    assert served_by(ups) == ["a", "b"]
    assert all(r.headers["x-api-key"] == KEYS[n] for n, up in ups.items() for r in up.requests)
    with pytest.raises(anthropic.BadRequestError):  # a 400 is the client's, not a reason to fall over
        ups["b"].enqueue(Error(400, message="bad"))
        p.anthropic().messages.create(model="m", max_tokens=32, messages=[{"role": "user", "content": "hi"}])
    assert served_by(ups)[2:] == ["b"]


@pytest.mark.parametrize("backend", ["redis", "sqlite"])
def test_a_deployment_one_instance_saw_fail_is_skipped_by_the_other(start_proxy, deployments, backend, request, tmp_path):
    """The breaker lives in the shared store: over one real redis-server, or one SQLite file."""
    state = shared_state(backend, request, tmp_path)
    ups = deployments("a", "b")
    doc = balanced(ups, resilience={"sync_secs": 0, "breaker": {"failures": 1, "window_secs": 30, "open_secs": 30}})
    doc["state"] = state
    first, second = start_proxy(doc), start_proxy(doc)
    ups["a"].enqueue(Error(503, message="down"))
    chat(first)  # a fails on the first instance: its breaker opens in the store
    assert served_by(ups) == ["a", "b"]
    for _ in range(4):  # round robin on the second would send two of these to a
        chat(second)
    assert served_by(ups)[2:] == ["b"] * 4


def test_the_capture_names_the_deployment_that_served(start_proxy, deployments):
    ups = deployments("a", "b")
    doc = balanced(ups)
    doc["capture"] = {"provider_request": True}
    p = start_proxy(doc)
    ups["a"].enqueue(Error(503, message="down"))
    raw = p.openai().chat.completions.with_raw_response.create(model="m", messages=[{"role": "user", "content": "hi"}])
    request_id = raw.headers["x-request-id"]
    from proxai.observability import capture
    from proxai.routing.pools import fingerprint

    root = p.proxy.recorder.root
    text = capture.file_path(root, request_id, "provider_request").read_text()
    assert text.startswith(f"POST {ups['b'].url}/v1/chat/completions")  # the last attempt's, b's
    assert f"x-proxai-served-by: {fingerprint(KEYS['b'])}" in text and "SECRET" not in text
    summary = capture.read_summary(request_id, root)
    for _ in range(300):  # written whole as the response ends, which the client may see a moment before
        if "route" in summary:
            break
        time.sleep(0.01)
        summary = capture.read_summary(request_id, root)
    assert (summary["route"], summary["provider"], summary["key"], summary["attempts"]) == ("lb", "b", fingerprint(KEYS["b"]), 2)


def test_a_single_entry_providers_list_uses_its_upstream_model(start_proxy, deployments):
    ups = deployments("a")
    p = start_proxy(balanced(ups, deployments=[{"provider": "a", "upstream_model": "a-model"}]))
    chat(p)
    assert [r.body["model"] for r in ups["a"].requests] == ["a-model"]
    ups = deployments("b")
    p = start_proxy(balanced(ups, deployments=["b"]))  # one key, nothing to choose: served as a plain route
    chat(p)
    assert [r.body["model"] for r in ups["b"].requests] == ["up-model"]
    assert p.proxy.resilience.pools.plan(p.proxy.router.resolve("m", CHAT)) is None
