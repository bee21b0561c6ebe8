"""Background responses across real server processes: kill -9 of the process running one, then
a restart on the same SQLite file (the run reads failed, saying why, never lost silently);
SIGTERM with a run in flight (the drain ends it failed); two instances over one redis-server
(either one answers a poll, a resumed stream and a cancel of the other's run)."""

from __future__ import annotations

import time

import openai
import pytest

from gemini_helpers import gemini_config
from proxai.endpoints.background import ALIVE_TTL_SECS, RESTARTED, SHUT_DOWN
from proxai.mock import Text, Turn
from proxai.http.streaming import SHUTDOWN_MESSAGE
from test_open_responses_compliance import RESOURCE, schema_errors

pytestmark = pytest.mark.slow


def slow_turn(words: int, delay: float) -> Turn:
    text = " ".join(f"w{i}" for i in range(words))
    return Turn(blocks=[Text(text, chunks=[f"w{i}" + ("" if i == words - 1 else " ") for i in range(words)])],
                delay_secs=delay)


def config(harness, state: dict, **server) -> dict:
    doc = gemini_config(harness.mock_url)
    doc["state"] = state
    if server:
        doc["server"] = server
    return doc


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="client-key", max_retries=0)


def wait_status(c: openai.OpenAI, response_id: str, statuses, timeout: float):
    deadline = time.monotonic() + timeout
    while True:
        response = c.responses.retrieve(response_id)
        if response.status in statuses or time.monotonic() > deadline:
            return response
        time.sleep(0.1)


@pytest.mark.parametrize("provider", ["anthropic", "responses"])
def test_kill_9_then_restart_marks_the_run_failed(harness, mock, start_server, tmp_path, provider):
    doc = config(harness, {"backend": "sqlite", "url": str(tmp_path / "state.db")})
    first = start_server(doc)
    mock.enqueue(slow_turn(100, 0.2))  # twenty seconds of answer
    c = client(first)
    created = c.responses.create(model=f"{provider}/m", input="Talk.", background=True)
    assert wait_status(c, created.id, ("in_progress",), 10).status == "in_progress"
    with c.responses.retrieve(created.id, stream=True) as live:  # until the answer has begun
        next(e for e in live if e.type == "response.output_text.delta")
    time.sleep(0.2)  # stored
    first.proc.kill()  # kill -9: no drain, no cleanup
    first.proc.wait(10)
    second = start_server(doc)
    c2 = client(second)
    failed = wait_status(c2, created.id, ("failed",), ALIVE_TTL_SECS + 5)
    assert failed.status == "failed" and failed.background is True
    assert failed.error.message == RESTARTED
    assert schema_errors(RESOURCE, failed.model_dump(mode="json", exclude_unset=True), "response") == []
    # The stream, resumed, replays what was stored and ends with the failure.
    events = list(c2.responses.retrieve(created.id, stream=True, starting_after=0))
    assert events[0].sequence_number == 1
    assert events[-1].type == "response.failed" and events[-1].response.error.message == RESTARTED
    deltas = [e.delta for e in events if e.type == "response.output_text.delta"]
    assert deltas and "".join(deltas).startswith("w0 ")  # what had arrived before the kill


def test_sigterm_drain_ends_a_running_background_response_failed(harness, mock, start_server, tmp_path):
    doc = config(harness, {"backend": "sqlite", "url": str(tmp_path / "state.db")}, shutdown_timeout_secs=1)
    first = start_server(doc)
    mock.enqueue(slow_turn(100, 0.2))
    c = client(first)
    created = c.responses.create(model="chat/m", input="Talk.", background=True)
    assert wait_status(c, created.id, ("in_progress",), 10).status == "in_progress"
    started = time.monotonic()
    first.terminate()
    first.proc.wait(20)
    assert time.monotonic() - started < 10  # the drain waited its second, not for the run's end
    c2 = client(start_server(doc))
    failed = c2.responses.retrieve(created.id)
    assert failed.status == "failed"
    assert failed.error.message in (SHUT_DOWN, SHUTDOWN_MESSAGE)  # the stream's own shutdown error, or the drain's


def test_two_instances_over_redis_poll_resume_and_cancel_each_others_runs(harness, mock, start_server, redis_server):
    redis_server.flush()
    doc = config(harness, {"backend": "redis", "url": redis_server.url})
    a, b = start_server(doc), start_server(doc)
    ca, cb = client(a), client(b)
    mock.enqueue(slow_turn(15, 0.1))
    created = ca.responses.create(model="gemini/m", input="Count.", background=True)
    # B polls A's run while it runs, then follows its stream from sequence number 3 to the end.
    assert wait_status(cb, created.id, ("in_progress",), 10).status == "in_progress"
    events = list(cb.responses.retrieve(created.id, stream=True, starting_after=3))
    assert [e.sequence_number for e in events] == list(range(4, 4 + len(events)))
    assert events[-1].type == "response.completed"
    done = cb.responses.retrieve(created.id)
    assert done.status == "completed" and done.output_text == " ".join(f"w{i}" for i in range(15))
    # B cancels a run A owns: A stops the provider call.
    mock.enqueue(slow_turn(100, 0.2))
    second = ca.responses.create(model="anthropic/m", input="Talk.", background=True)
    assert wait_status(cb, second.id, ("in_progress",), 10).status == "in_progress"
    cancelled = cb.responses.cancel(second.id)
    assert cancelled.status == "cancelled"
    deadline = time.monotonic() + 3
    while mock.cut_short == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert mock.cut_short == 1
    assert ca.responses.retrieve(second.id).status == "cancelled"
