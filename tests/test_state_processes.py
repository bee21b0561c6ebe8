"""The state across real server processes: a crash between turns (kill -9, restart, the
conversation continues from the SQLite file), `--workers 2` on one SQLite file, and two
instances on different ports sharing one redis-server."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import openai
import pytest
import yaml

from harness import default_config
from proxai.mock import Text, ToolCall, Turn
from bench.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent


class Server:
    def __init__(self, config: dict, tmp_path: Path, name: str, workers: int = 1):
        self.port = free_port()
        self.path = tmp_path / f"{name}.yaml"
        config = dict(config, server={"port": self.port})
        self.path.write_text(yaml.safe_dump(config))
        self.home = tmp_path / "home"
        self.log = open(tmp_path / f"{name}.log", "ab")
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "server.py"), "--config", str(self.path), "--workers", str(workers)],
            cwd=tmp_path, stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "PROXAI_HOME": str(self.home)},
            start_new_session=True)
        self.url = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1):
                    return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        raise RuntimeError(f"server did not start: {(tmp_path / f'{name}.log').read_text()[-2000:]}")

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="client-key", max_retries=0)

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)  # the server and any workers, no chance to clean up
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill9()
        self.log.close()


def texts(messages):
    out = []
    for m in messages:
        content = m["content"]
        for part in ([{"type": "text", "text": content}] if isinstance(content, str) else content or []):
            if part.get("type") == "text" and m["role"] in ("user", "assistant"):
                out.append((m["role"], part["text"]))
    return out


@pytest.fixture
def servers():
    started: list[Server] = []
    yield started
    for s in started:
        s.stop()


def test_kill9_between_turns_conversation_continues_from_sqlite(harness, mock, tmp_path, servers):
    config = default_config(harness.mock_url)  # no state section: the sqlite default under PROXAI_HOME
    first = Server(config, tmp_path, "first")
    servers.append(first)
    mock.enqueue(Turn([Text("Checking."), ToolCall("call_9", "get_time", "{}")]))
    c = first.client()
    r1 = c.responses.create(model="anthropic/up", input="What time is it?",
                            tools=[{"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {}}}])
    first.kill9()
    assert (tmp_path / "home" / "state.db").exists()

    second = Server(config, tmp_path, "second")
    servers.append(second)
    mock.enqueue(Turn([Text("Noon.")]))
    r2 = second.client().responses.create(model="anthropic/up", previous_response_id=r1.id,
                                          input=[{"type": "function_call_output", "call_id": "call_9", "output": "12:00"}])
    assert r2.output_text == "Noon."
    msgs = mock.requests[-1].body["messages"]
    assert msgs[0] == {"role": "user", "content": [{"type": "text", "text": "What time is it?"}]}
    assert msgs[1]["content"][1] == {"type": "tool_use", "id": "call_9", "name": "get_time", "input": {}}
    assert msgs[2]["content"][0]["tool_use_id"] == "call_9"
    assert second.client().responses.retrieve(r1.id).output[1].call_id == "call_9"


def test_two_workers_share_one_sqlite_file(harness, mock, tmp_path, servers):
    server = Server(default_config(harness.mock_url), tmp_path, "workers", workers=2)
    servers.append(server)
    pids = set()
    deadline = time.monotonic() + 20
    while len(pids) < 2 and time.monotonic() < deadline:
        req = urllib.request.Request(server.url + "/healthz", headers={"Connection": "close"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            pids.add(json.loads(resp.read())["pid"])
    assert len(pids) == 2
    turns = 8
    mock.enqueue(*[Turn([Text(f"a{i}")]) for i in range(turns)])
    previous = None
    for i in range(turns):
        # A new connection per turn, so the kernel spreads the turns over both workers.
        with openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0,
                           default_headers={"Connection": "close"}) as c:
            r = c.responses.create(model="chat/up", input=f"u{i}", **({"previous_response_id": previous} if previous else {}))
        previous = r.id
    expected = []
    for i in range(turns - 1):
        expected += [("user", f"u{i}"), ("assistant", f"a{i}")]
    assert texts(mock.requests[-1].body["messages"]) == expected + [("user", f"u{turns - 1}")]


def test_two_instances_share_conversations_over_one_redis(harness, mock, tmp_path, servers, redis_server):
    redis_server.flush()
    config = default_config(harness.mock_url)
    config["state"] = {"backend": "redis", "url": redis_server.url}
    one, two = Server(config, tmp_path, "one"), Server(config, tmp_path, "two")
    servers.extend([one, two])
    assert one.port != two.port
    mock.enqueue(Turn([Text("first answer")]), Turn([Text("second answer")]))
    r1 = one.client().responses.create(model="chat/up", input="turn one")
    with two.client().responses.stream(model="anthropic/up", input="turn two", previous_response_id=r1.id) as s:
        list(s)
        r2 = s.get_final_response()
    assert texts(mock.requests[-1].body["messages"]) == [("user", "turn one"), ("assistant", "first answer"), ("user", "turn two")]
    assert two.client().responses.retrieve(r1.id).output_text == "first answer"
    assert one.client().responses.retrieve(r2.id).output_text == "second answer"
    assert one.client().responses.delete(r2.id) is None
    with pytest.raises(openai.NotFoundError):
        two.client().responses.retrieve(r2.id)


# A local store that cannot open is a misconfiguration; an unreachable Redis is an outage the
# server starts through and reconnects after (test_readiness_degraded.py).
@pytest.mark.parametrize("state, message", [
    ({"backend": "sqlite", "url": "/proc/no-such-dir/state.db"}, "cannot open the sqlite state file"),
])
def test_a_local_store_that_cannot_open_stops_startup_with_a_clear_message(tmp_path, state, message):
    config = {"providers": {"c": {"protocol": "openai_chat_completions", "base_url": "http://127.0.0.1:9/v1", "api_key": "k"}},
              "state": state, "server": {"port": free_port()}}
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run([sys.executable, str(ROOT / "server.py"), "--config", str(path)], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "PROXAI_HOME": str(tmp_path)})
    assert done.returncode == 1
    assert message in done.stderr and "Traceback" not in done.stderr
