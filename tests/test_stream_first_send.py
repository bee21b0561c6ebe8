"""A stream's response headers reach the client in the same send as its first event."""

from __future__ import annotations

import pytest
from aiohttp import http_writer

from proxai.mock import Text, Turn

MESSAGES = [{"role": "user", "content": "Hi"}]


@pytest.fixture
def sends(monkeypatch):
    """What the proxy's aiohttp writers hand their transports, one entry per send."""
    seen: list[bytes] = []
    write, writelines = http_writer.StreamWriter._write, http_writer.StreamWriter._writelines

    def _write(self, chunk):
        seen.append(bytes(chunk))
        return write(self, chunk)

    def _writelines(self, chunks):
        chunks = list(chunks)
        seen.append(b"".join(bytes(c) for c in chunks))
        return writelines(self, chunks)

    monkeypatch.setattr(http_writer.StreamWriter, "_write", _write)
    monkeypatch.setattr(http_writer.StreamWriter, "_writelines", _writelines)
    return seen


def _first_send(sends: list[bytes]) -> bytes:
    (head,) = [s for s in sends if s.startswith(b"HTTP/1.1 200") and b"x-proxai-request-id" in s.lower()]
    return head


@pytest.mark.parametrize("model", ["chat/gpt-test", "anthropic/claude-test"])  # pass-through, translated
def test_headers_go_out_with_the_first_event(openai_client, mock, sends, model):
    mock.enqueue(Turn([Text("Paris is the capital.", chunks=["Paris ", "is the ", "capital."])]))
    stream = openai_client.chat.completions.create(model=model, messages=MESSAGES, stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "Paris is the capital."
    head = _first_send(sends)
    assert b"text/event-stream" in head
    assert b"\r\n\r\n" in head and b"data: " in head.split(b"\r\n\r\n", 1)[1], head
