"""The continuation envelope: carried state comes back byte-identical, foreign or tampered state never does."""
import pytest

import engine
from engine.hooks import continuation as cont
from engine.template import Run, Scope


def scope(provider_protocol="anthropic_messages", provider="ant", secret=None, enabled=True):
    ctx = engine.Context("openai_chat_completions", provider_protocol, provider_name=provider,
                         continuation_secret=secret, continuation_enabled=enabled)
    return Scope(None, {"ctx": ctx.vars()}, "", ctx, Run())


SIG = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxDYjDYnbO2bLjMHKIiMKuz8L+/q+z4X/==\n"
THINK = {"type": "reasoning", "text": "Let me think… ünïcödé", "opaque": {"protocol": "anthropic_messages", "provider": "ant", "signature": SIG}}
REDACTED = {"type": "reasoning", "text": None, "opaque": {"protocol": "anthropic_messages", "provider": "ant", "data": "ENCRYPTED+/=="}}


def test_wrap_unwrap_round_trip_is_byte_identical():
    s = scope()
    env = cont.wrap(s, part=THINK)
    assert env.startswith("pxc1.") and "\n" not in env
    back = cont.unwrap(s, value=env, text=THINK["text"])
    assert back == {"protocol": "anthropic_messages", "provider": "ant", "signature": SIG}
    assert cont.unwrap(s, value=cont.wrap(s, part=REDACTED), text=None)["data"] == "ENCRYPTED+/=="


def test_changed_text_foreign_and_malformed_values_are_dropped_with_a_trace():
    s = scope()
    env = cont.wrap(s, part=THINK)
    assert cont.unwrap(s, value=env, text="edited") is None
    assert cont.unwrap(s, value="EqQBCgIYAhIM-real-anthropic-signature", text="x") is None
    assert cont.unwrap(s, value="pxc1.!!!", text="x") is None
    traces = " ".join(s.ctx.traces)
    assert "changed" in traces and "foreign" in traces and "malformed" in traces
    assert "Let me think" not in traces  # no prompt or reasoning text in traces


def test_hmac_when_a_secret_is_configured():
    signed = scope(secret="k1")
    env = cont.wrap(signed, part=THINK)
    assert env.count(".") == 2
    assert cont.unwrap(signed, value=env, text=THINK["text"])["signature"] == SIG
    assert cont.unwrap(scope(secret="k2"), value=env, text=THINK["text"]) is None
    tampered = env[:-2] + ("AA" if not env.endswith("AA") else "BB")
    assert cont.unwrap(signed, value=tampered, text=THINK["text"]) is None
    unsigned = cont.wrap(scope(), part=THINK)
    assert cont.unwrap(signed, value=unsigned, text=THINK["text"]) is None


def test_continuation_off_carries_nothing():
    s = scope(enabled=False)
    assert cont.wrap(s, part=THINK) is None
    assert cont.suffix(s, parts=[THINK]) == ""


def test_chat_suffix_restores_interleaved_order():
    s = scope()
    think2 = {**THINK, "text": "second thought", "opaque": {**THINK["opaque"], "signature": "SIG2"}}
    call1 = {"type": "tool_call", "id": "toolu_1", "name": "a", "arguments": "{}"}
    call2 = {"type": "tool_call", "id": "toolu_2", "name": "b", "arguments": "{}"}
    turn = [THINK, call1, REDACTED, think2, {"type": "text", "text": "done"}, call2]
    visible = cont.reasoning_text(s, parts=turn)
    assert visible == THINK["text"] + "\n\n" + "second thought"
    carried = visible + cont.suffix(s, parts=turn)
    split = cont.split_suffix(s, text=carried)
    assert split["text"] == visible
    # A Chat client replays content first, then tool calls: the envelope restores the original order.
    restored = cont.restore(s, parts=[{"type": "text", "text": "done"}, call1, call2],
                            envelope=split["envelope"], text=split["text"])
    assert [(p["type"], p.get("id") or (p.get("opaque") or {}).get("signature") or (p.get("opaque") or {}).get("data"))
            for p in restored] == [("reasoning", SIG), ("tool_call", "toolu_1"), ("reasoning", "ENCRYPTED+/=="),
                                   ("reasoning", "SIG2"), ("text", None), ("tool_call", "toolu_2")]
    assert restored[0]["text"] == THINK["text"] and restored[3]["text"] == "second thought"


def test_chat_suffix_with_edited_reasoning_keeps_text_but_drops_signature():
    s = scope()
    carried = cont.reasoning_text(s, parts=[THINK]) + cont.suffix(s, parts=[THINK])
    split = cont.split_suffix(s, text=carried.replace("think", "THINK", 1))
    restored = cont.restore(s, parts=[], envelope=split["envelope"], text=split["text"])
    assert restored == [{"type": "reasoning", "text": "Let me THINK… ünïcödé"}]


def test_plain_reasoning_without_envelope_stays_plain():
    s = scope()
    split = cont.split_suffix(s, text="just thinking, pxc1 is mentioned but not an envelope!")
    assert split["envelope"] is None
    assert cont.restore(s, parts=[], envelope=None, text=split["text"]) == [{"type": "reasoning", "text": split["text"]}]


@pytest.mark.parametrize("protocol,provider,ok", [("anthropic_messages", "ant", True), ("anthropic_messages", "other", False),
                                                    ("openai_responses", "ant", False)])
def test_usable_only_for_the_producing_provider(protocol, provider, ok):
    s = scope(provider_protocol=protocol, provider=provider)
    assert cont.usable(s, opaque=THINK["opaque"]) is ok
