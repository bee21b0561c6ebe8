"""Reload (SIGHUP, file watch) and /readyz: a new config and rules set replaces the old one only
when valid, and requests and open streams finish on the set they started with."""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai
import pytest
import yaml

from harness import _serve
from proxai.operations import reload
from proxai.http.app import PROXY_KEY, build_app, make_runner
from proxai.routing.config import load_file
from proxai.mock import Text, Turn
from test_passthrough_e2e import MESSAGES, raw_post
from test_rules_override_e2e import OVERRIDE  # Anthropic pause_turn reaches Chat clients as `length`

ROOT = Path(__file__).resolve().parent.parent



class Served:
    def __init__(self, harness, path: Path, watch: float | None = None):
        self.harness = harness
        self.app = build_app(load_file(path))
        self.reloader = reload.attach(self.app, lambda: load_file(path), watch=watch)
        self.served = harness.loop.run(_serve(make_runner(self.app)))
        self.url = self.served.url

    @property
    def proxy(self):
        return self.app[PROXY_KEY]

    def reload(self) -> bool:
        return self.harness.loop.run(self.reloader.reload())

    def client(self) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.url + "/v1", api_key="k", max_retries=0)

    def stop(self) -> None:
        self.harness.loop.run(self.served.runner.cleanup())


def write(path: Path, doc: dict) -> None:
    path.write_text(yaml.safe_dump(doc))


@pytest.fixture
def config_file(harness, tmp_path) -> Path:
    path = tmp_path / "proxai.yaml"
    write(path, harness.default_config())
    return path


@pytest.fixture
def served(harness, config_file, mock):
    s = Served(harness, config_file)
    yield s
    s.stop()


def with_override(harness, tmp_path: Path, routes: list | None = None) -> dict:
    rules = tmp_path / "rules"
    rules.mkdir(exist_ok=True)
    (rules / "stop.yaml").write_text(OVERRIDE)
    doc = harness.default_config()
    doc["rules_dir"] = "rules"  # relative to the config file
    doc["routing"]["routes"] = (routes or []) + doc["routing"]["routes"]
    return doc


def finish(client, model="anthropic/claude-x", **kw) -> str:
    return client.chat.completions.create(model=model, messages=MESSAGES, **kw).choices[0].finish_reason


def test_open_stream_finishes_on_the_rules_it_started_with(served, harness, config_file, tmp_path, mock):
    client = served.client()
    mock.enqueue(Turn([Text("one two three four five six", chunks=["one ", "two ", "three ", "four ", "five ", "six"])],
                      stop="pause_turn", delay_secs=0.15))
    started = threading.Event()
    result: dict = {}

    def stream():
        reasons, text = [], ""
        for chunk in client.chat.completions.create(model="anthropic/claude-x", messages=MESSAGES, stream=True):
            started.set()
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                if chunk.choices[0].finish_reason:
                    reasons.append(chunk.choices[0].finish_reason)
        result.update(reasons=reasons, text=text)

    t = threading.Thread(target=stream)
    t.start()
    assert started.wait(5)
    alias = {"name": "fast", "model_pattern": "fast", "match_kind": "exact", "provider": "anthropic",
             "upstream_model": "claude-fast"}
    write(config_file, with_override(harness, tmp_path, [alias]))
    assert served.reload()
    assert served.proxy.live.number == 2
    # New requests: the new rules and routes.
    mock.enqueue(Turn([Text("x")], stop="pause_turn"))
    assert finish(client) == "length"
    mock.enqueue(Turn([Text("x")], stop="pause_turn"))
    assert finish(client, model="fast") == "length"
    assert mock.requests[-1].path == "/v1/messages" and mock.requests[-1].body["model"] == "claude-fast"
    t.join(10)
    # The stream opened before the reload kept the old table to its end.
    assert result == {"reasons": ["stop"], "text": "one two three four five six"}
    client.close()


def test_bad_config_reload_is_logged_and_the_old_set_stays(served, config_file, mock, caplog):
    caplog.set_level(logging.INFO, logger="proxai.reload")
    doc = yaml.safe_load(config_file.read_text())
    doc["routing"]["routes"][0]["provider"] = "nope"
    doc["server"] = {"bogus_key": 1}
    write(config_file, doc)
    assert not served.reload()
    assert served.proxy.live.number == 1
    failed = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(failed) == 1 and "reload failed, still serving generation 1" in failed[0].getMessage()
    assert "server.bogus_key: unknown key" in failed[0].getMessage()
    client = served.client()
    mock.enqueue(Turn([Text("still here")]))
    out = client.chat.completions.create(model="anthropic/claude-x", messages=MESSAGES)
    assert out.choices[0].message.content == "still here"
    status, _, body = raw_post(served.url, "/readyz", b"", method="GET")
    ready = json.loads(body)
    assert status == 200 and ready["status"] == "ready" and ready["generation"] == 1
    assert "server.bogus_key" in ready["last_reload_error"]
    client.close()


def test_bad_rules_reload_names_the_file_and_keeps_the_old_rules(served, harness, config_file, tmp_path, mock, caplog):
    caplog.set_level(logging.ERROR, logger="proxai.reload")
    doc = with_override(harness, tmp_path)
    (tmp_path / "rules" / "bad.yaml").write_text("kind: tables\ntables:\n  - name: x->y\n    from: ir.stop\n    map: {}\n")
    write(config_file, doc)
    assert not served.reload()
    assert "bad.yaml:" in caplog.records[-1].getMessage()
    mock.enqueue(Turn([Text("x")], stop="pause_turn"))
    assert finish(served.client()) == "stop"  # neither the good override nor the bad one applied
    (tmp_path / "rules" / "bad.yaml").unlink()
    assert served.reload() and served.proxy.live.number == 2
    mock.enqueue(Turn([Text("x")], stop="pause_turn"))
    assert finish(served.client()) == "length"
    status, _, body = raw_post(served.url, "/readyz", b"", method="GET")
    assert status == 200 and "last_reload_error" not in json.loads(body)


@pytest.mark.slow
def test_reloads_under_load_with_open_streams(served, harness, config_file, tmp_path, mock):
    plain = harness.default_config()
    overridden = with_override(harness, tmp_path)
    stop_event = threading.Event()

    def reply(rec):
        return Turn([Text("a b c d", chunks=["a ", "b ", "c ", "d"])], stop="pause_turn", delay_secs=0.02)

    def worker(i: int) -> list:
        client = served.client()
        seen = []
        try:
            for n in range(12):
                if (i + n) % 2:
                    chunks = list(client.chat.completions.create(model="anthropic/claude-x", messages=MESSAGES,
                                                                 stream=True))
                    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
                    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
                else:
                    out = client.chat.completions.create(model="anthropic/claude-x", messages=MESSAGES)
                    text, reasons = out.choices[0].message.content, [out.choices[0].finish_reason]
                seen.append((text, tuple(reasons)))
        finally:
            client.close()
        return seen

    mock.enqueue(*[reply] * 200)
    reloads = []

    def reloader():
        n = 0
        while not stop_event.is_set():
            write(config_file, overridden if n % 2 == 0 else plain)
            reloads.append(served.reload())
            n += 1
            time.sleep(0.05)

    r = threading.Thread(target=reloader)
    r.start()
    try:
        with ThreadPoolExecutor(6) as pool:
            results = [x for batch in pool.map(worker, range(6)) for x in batch]
    finally:
        stop_event.set()
        r.join(10)
    assert len(reloads) >= 3 and all(reloads)
    assert len(results) == 72
    for text, reasons in results:
        assert text == "a b c d"
        assert reasons in (("stop",), ("length",))  # one table or the other, never a mix or an error
    assert {reasons for _, reasons in results} == {("stop",), ("length",)}


def test_file_watch_reloads_on_change(harness, config_file, tmp_path, mock):
    s = Served(harness, config_file, watch=0.05)
    try:
        write(config_file, with_override(harness, tmp_path))
        deadline = time.monotonic() + 20
        while s.proxy.live.number == 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert s.proxy.live.number == 2
        mock.enqueue(Turn([Text("x")], stop="pause_turn"))
        assert finish(s.client()) == "length"
        # A change inside rules_dir is seen too.
        (tmp_path / "rules" / "stop.yaml").write_text(OVERRIDE.replace("length", "content_filter"))
        deadline = time.monotonic() + 20
        while s.proxy.live.number == 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        mock.enqueue(Turn([Text("x")], stop="pause_turn"))
        assert finish(s.client()) == "content_filter"
    finally:
        s.stop()


def test_readyz_reports_each_check(served):
    status, _, body = raw_post(served.url, "/readyz", b"", method="GET")
    # The state store (sqlite by default) answers its check too.
    assert status == 200 and json.loads(body) == {"status": "ready", "checks": {"rules": "ok", "state_store": "ok"}, "generation": 1}

    async def store_down():
        return "redis unreachable"

    served.proxy.readiness.add("state_store", store_down)
    status, _, body = raw_post(served.url, "/readyz", b"", method="GET")
    assert status == 503
    assert json.loads(body)["checks"] == {"rules": "ok", "state_store": "redis unreachable"}

    def broken():
        raise RuntimeError("boom")

    served.proxy.readiness.add("state_store", broken)
    status, _, body = raw_post(served.url, "/readyz", b"", method="GET")
    assert status == 503 and json.loads(body)["checks"]["state_store"] == "check failed: RuntimeError"
    served.proxy.readiness.remove("state_store")
    assert raw_post(served.url, "/readyz", b"", method="GET")[0] == 200


def test_readyz_is_open_without_the_proxy_keys(harness, start_proxy):
    doc = harness.default_config()
    doc["server"] = {"api_keys": ["only-this"]}
    p = start_proxy(doc)
    assert raw_post(p.url, "/readyz", b"", method="GET")[0] == 200
    assert raw_post(p.url, "/v1/chat/completions", {"model": "m", "messages": MESSAGES})[0] == 401


# --- check-config fails exactly when serve would ----------------------------------------------------


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    from proxai.tools import cli
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        code = cli.main(list(args))
    finally:  # `serve` installs its own log handler: leave the root logger as it was
        root.handlers[:] = handlers
        root.setLevel(level)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_check_config_loads_the_rules(harness, tmp_path, capsys):
    path = tmp_path / "proxai.yaml"
    doc = harness.default_config()
    doc["rules_dir"] = "missing-rules"
    write(path, doc)
    code, _, err = run_cli(capsys, "check-config", str(path))
    assert code == 1 and "rules directory not found" in err and "missing-rules" in err
    code, _, err = run_cli(capsys, "serve", "--config", str(path), "--port", "0")
    assert code == 1 and "missing-rules" in err

    (tmp_path / "missing-rules").mkdir()
    (tmp_path / "missing-rules" / "bad.yaml").write_text("kind: tables\ntables:\n  - name: x->y\n    from: ir.stop\n    map: {}\n")
    code, _, err = run_cli(capsys, "check-config", str(path))
    assert code == 1 and "bad.yaml:" in err

    (tmp_path / "missing-rules" / "bad.yaml").write_text(OVERRIDE)
    code, out, _ = run_cli(capsys, "check-config", str(path))
    assert code == 0 and "ok (3 providers, 3 routes)" in out


# --- SIGHUP on the real command ---------------------------------------------------------------------


def _wait_for(proc: subprocess.Popen, pattern: str, lines: list[str], timeout: float = 15) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        m = re.search(pattern, line)
        if m:
            return m
    raise AssertionError(f"no line matching {pattern!r} in:\n{''.join(lines)}")


@pytest.mark.slow
@pytest.mark.parametrize("workers", [1, 2])
def test_sighup_reloads_the_running_server(harness, tmp_path, mock, workers):
    path = tmp_path / "proxai.yaml"
    write(path, harness.default_config())
    proc = subprocess.Popen([sys.executable, "-m", "proxai.tools.cli", "serve", "--config", str(path), "--port", "0",
                             "--workers", str(workers)],
                            cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    try:
        if workers == 1:
            url = _wait_for(proc, r"on (http://\S+)", lines).group(1)
        else:
            url = _wait_for(proc, r"on (http://\S+) with", lines).group(1)
            for _ in range(workers):
                _wait_for(proc, r"worker pid \d+ serving", lines)
        mock.enqueue(*[Turn([Text("x")], stop="pause_turn")] * 4)
        client = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
        assert finish(client) == "stop"
        write(path, with_override(harness, tmp_path))
        proc.send_signal(signal.SIGHUP)
        for _ in range(workers):
            _wait_for(proc, r"reloaded config and rules: generation 2", lines)
        assert finish(client) == "length"
        doc = harness.default_config()
        doc["routing"]["routes"][0]["match_kind"] = "sideways"
        write(path, doc)
        proc.send_signal(signal.SIGHUP)
        for _ in range(workers):
            _wait_for(proc, r"reload failed, still serving generation 2:$", lines)
            _wait_for(proc, r"^\S*proxai\.yaml:\d+:\d+: routing\.routes\[0\]\.match_kind: must be one of", lines)
        assert finish(client) == "length"
        assert proc.poll() is None
        client.close()
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=15)


def test_demo_mode_is_ready_once_its_upstreams_are_up_and_reloads_its_rules(harness):
    p = harness.start_demo()
    try:
        status, _, body = raw_post(p.url, "/readyz", b"", method="GET")
        assert status == 200 and json.loads(body)["checks"] == {"rules": "ok", "state_store": "ok", "demo_upstreams": "ok"}
        reloader = reload.Reloader(p.proxy, lambda: p.proxy.live.config)
        assert harness.loop.run(reloader.reload()) and p.proxy.live.number == 2
        client = p.openai()
        assert "demo" in client.chat.completions.create(model="anthropic/x", messages=MESSAGES).choices[0].message.content
        client.close()
    finally:
        p.stop()
