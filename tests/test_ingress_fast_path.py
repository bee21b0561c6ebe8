"""The ingress fast path accepts exactly what the endpoint's JSON Schema accepts."""
from hypothesis import given, settings, strategies as st

from proxai.http import ingress
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**8, 10**8) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5) | st.sampled_from(["", "x" * 1001, 0.0, 1.0, 2.5, -1, 0, 10**7 + 1, 129]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=4,
)


def bodies(protocol):
    names = sorted(ingress.VALIDATORS[protocol].schema["properties"]) + ["unknown_field"]
    return st.dictionaries(st.sampled_from(names), VALUES, max_size=8)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.sampled_from(sorted(ingress.FAST)).flatmap(lambda p: st.tuples(st.just(p), bodies(p))))
def test_fast_path_agrees_with_jsonschema(case):
    protocol, body = case
    assert ingress.FAST[protocol] is not None
    assert ingress.FAST[protocol](body) == ingress.VALIDATORS[protocol].is_valid(body)


def test_fast_path_on_typical_bodies():
    ok = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 10, "stream": True}
    assert ingress.FAST["anthropic_messages"](ok)
    assert not ingress.FAST["anthropic_messages"]({**ok, "max_tokens": 0})
    assert not ingress.FAST["anthropic_messages"]({**ok, "stream": "yes"})
    assert not ingress.FAST["openai_chat_completions"]({"messages": []})
