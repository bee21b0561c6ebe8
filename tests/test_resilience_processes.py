"""A cooldown shared by the worker processes of `server.py --workers 2` over one SQLite file:
a key rate limited in one worker is rested by the other."""

from __future__ import annotations

import pytest

from proxai.mock import Error
from test_state_processes import Server

KEY_A, KEY_B = "sk-proc-A-SECRET", "sk-proc-B-SECRET"


@pytest.fixture
def servers():
    started: list[Server] = []
    yield started
    for s in started:
        s.stop()


def key_of(record) -> str:
    return record.headers.get("authorization", "")[7:]


def test_workers_share_a_cooldown_over_sqlite(harness, mock, tmp_path, servers):
    config = {
        "providers": {"pool": {"protocol": "openai_chat_completions", "base_url": harness.mock_url + "/v1",
                               "api_keys": [KEY_A, KEY_B]}},
        "routing": {"routes": [{"name": "pool", "model_pattern": "m", "provider": "pool"}]},
        "state": {"backend": "sqlite", "url": str(tmp_path / "state.db")},
        "resilience": {"sync_secs": 0},  # every request reads the shared view
    }
    server = Server(config, tmp_path, "workers", workers=2)
    servers.append(server)
    mock.enqueue(Error(429, headers={"Retry-After": "60"}, message="rate limited"))
    client = server.client()
    client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert [key_of(r) for r in mock.requests] == [KEY_A, KEY_B]
    # New connections spread over both workers; each worker's round robin would start with
    # A, which rests in the shared file: only B is used.
    for _ in range(8):
        server.client().with_options(max_retries=0).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}])
    assert [key_of(r) for r in mock.requests[2:]] == [KEY_B] * 8
