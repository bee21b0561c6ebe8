from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from proxai.http.sse import SSEEvent, SSEParser, encode_event


def parse_all(chunks: list[bytes]) -> list[SSEEvent]:
    parser = SSEParser()
    events: list[SSEEvent] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    parser.close()
    return events


def test_single_data_event():
    assert parse_all([b'data: {"a":1}\n\n']) == [SSEEvent(None, '{"a":1}')]


def test_named_event_and_several_data_lines_are_joined_with_newline():
    raw = b"event: message_start\ndata: line1\ndata: line2\n\n"
    assert parse_all([raw]) == [SSEEvent("message_start", "line1\nline2")]


def test_comments_id_retry_are_ignored_and_event_without_data_is_skipped():
    raw = b": keep-alive\n\nid: 7\nretry: 100\ndata: x\n\nevent: ping\n\n"
    assert parse_all([raw]) == [SSEEvent(None, "x")]


def test_value_without_space_after_colon_and_only_one_space_stripped():
    assert parse_all([b"data:x\n\ndata:  y\n\n"]) == [SSEEvent(None, "x"), SSEEvent(None, " y")]


def test_crlf_cr_and_mixed_line_endings():
    raw = b"event: a\r\ndata: 1\r\n\r\nevent: b\rdata: 2\r\rdata: 3\n\r\n"
    assert parse_all([raw]) == [SSEEvent("a", "1"), SSEEvent("b", "2"), SSEEvent(None, "3")]


def test_crlf_split_between_cr_and_lf_is_one_line_ending():
    # The first chunk ends in CR; the LF opening the next chunk must not count as a blank line.
    assert parse_all([b"data: 1\r", b"\ndata: 2\r\n\r\n"]) == [SSEEvent(None, "1\n2")]


def test_multibyte_character_split_across_chunks():
    raw = 'data: {"t":"h\u00e9llo \u4e16\u754c \U0001f600"}\n\n'.encode()
    for cut in range(1, len(raw)):
        assert parse_all([raw[:cut], raw[cut:]]) == [SSEEvent(None, '{"t":"h\u00e9llo \u4e16\u754c \U0001f600"}')]


def test_every_split_point_gives_the_same_events():
    raw = b"event: x\r\ndata: 1\r\n\r\n: c\n\ndata: 2\n\nevent: y\rdata: 3\r\r"
    expected = [SSEEvent("x", "1"), SSEEvent(None, "2"), SSEEvent("y", "3")]
    for i in range(len(raw) + 1):
        for j in range(i, len(raw) + 1):
            assert parse_all([raw[:i], raw[i:j], raw[j:]]) == expected


def test_leftover_without_blank_line_is_not_an_event():
    parser = SSEParser()
    assert parser.feed(b"data: 1\n\ndata: partial\n") == [SSEEvent(None, "1")]
    parser.close()
    assert parser.feed(b"data: 2\n\n") == [SSEEvent(None, "2")]


def test_empty_chunks_are_harmless():
    parser = SSEParser()
    assert parser.feed(b"") == []
    assert parser.feed(b"data: 1\r") == []
    assert parser.feed(b"") == []
    assert parser.feed(b"\r") == [SSEEvent(None, "1")]


def test_encode_event():
    assert encode_event('{"a":1}') == b'data: {"a":1}\n\n'
    assert encode_event(b"{}", "message_stop") == b"event: message_stop\ndata: {}\n\n"
    assert encode_event("a\nb", "x") == b"event: x\ndata: a\ndata: b\n\n"
    assert encode_event("\u00e9") == "data: \u00e9\n\n".encode()


_text = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=30)


@settings(max_examples=200, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.none() | st.text("abcdefgh._", min_size=1, max_size=10), st.lists(_text, min_size=1, max_size=3)),
        max_size=6,
    ),
    ending=st.sampled_from(["\n", "\r\n", "\r"]),
    cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=8),
)
def test_roundtrip_any_split(events, ending, cuts):
    raw = b""
    expected = []
    for name, lines in events:
        block = (f"event: {name}{ending}" if name else "") + "".join(f"data: {ln}{ending}" for ln in lines) + ending
        raw += block.encode()
        expected.append(SSEEvent(name, "\n".join(lines)))
    points = sorted({min(c, len(raw)) for c in cuts})
    chunks = [raw[a:b] for a, b in zip([0, *points], [*points, len(raw)])]
    assert parse_all(chunks) == expected
