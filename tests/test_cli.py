"""The command line: python server.py, proxai serve / check-config / lint."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from proxai.tools import cli
ROOT = Path(__file__).resolve().parent.parent


def write_config(tmp_path: Path, doc: dict) -> Path:
    path = tmp_path / "proxai.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


# --- check-config ------------------------------------------------------------------------------


def test_check_config_ok(tmp_path, harness, capsys):
    path = write_config(tmp_path, harness.default_config())
    assert cli.main(["check-config", str(path)]) == 0
    assert "ok (3 providers, 3 routes)" in capsys.readouterr().out


def test_check_config_reports_each_problem_with_its_path(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("PROXAI_TEST_UNSET", raising=False)
    doc = {
        "server": {"prot": 1},
        "providers": {
            "ant": {"protocol": "anthropic", "base_url": "https://api.anthropic.com", "api_key": "${PROXAI_TEST_UNSET}"},
        },
    }
    path = write_config(tmp_path, doc)
    assert cli.main(["check-config", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:3:5: providers.ant.api_key: environment variable PROXAI_TEST_UNSET is not set" in err
    monkeypatch.setenv("PROXAI_TEST_UNSET", "x")
    assert cli.main(["check-config", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"{path}:7:3: server.prot: unknown key" in err
    assert f"{path}:5:5: providers.ant.protocol: must be one of" in err


def test_check_config_missing_file(tmp_path, capsys):
    assert cli.main(["check-config", str(tmp_path / "nope.yaml")]) == 1
    assert "cannot read config file" in capsys.readouterr().err


def test_lint_delegates_to_the_rules_linter(monkeypatch):
    import engine.lint

    seen = []
    monkeypatch.setattr(engine.lint, "main", lambda argv: seen.append(argv) or 3)
    assert cli.main(["lint", "rules", "more-rules"]) == 3
    assert cli.main(["lint"]) == 3
    assert seen == [["rules", "more-rules"], []]


def test_no_command_prints_help(capsys):
    assert cli.main([]) == 2
    assert "serve" in capsys.readouterr().err


def test_maintainer_only_commands_say_so_in_help(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    top = capsys.readouterr().out
    assert "docs        maintainers:" in top
    with pytest.raises(SystemExit):
        cli.main(["lint", "--help"])
    assert "maintainers: regenerate schemas/templates.schema.json" in " ".join(capsys.readouterr().out.split())


def test_loopback_detection():
    from proxai.http.origin import loopback_listener

    assert loopback_listener("127.0.0.1") and loopback_listener("::1") and loopback_listener("localhost")
    assert not loopback_listener("0.0.0.0") and not loopback_listener("10.1.2.3") and not loopback_listener("example.com")


# --- serving from a real process -----------------------------------------------------------------


class ServerProcess:
    def __init__(self, args: list[str]):
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "server.py"), "--port", "0", *args],
            cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self.first_line = self.proc.stderr.readline()
        m = re.search(r"on (http://[^\s]+)", self.first_line)
        assert m, f"unexpected first log line: {self.first_line!r}"
        self.url = m.group(1)

    def post(self, path: str, body: dict, headers: dict | None = None) -> dict:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json", **(headers or {})})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return json.loads(resp.read())

    def stop(self) -> tuple[int, str]:
        self.proc.send_signal(signal.SIGTERM)
        _, err = self.proc.communicate(timeout=10)
        return self.proc.returncode, err


def test_server_py_demo_mode_serves_everything_out_of_the_box():
    server = ServerProcess([])
    try:
        assert "demo mode" in server.first_line
        with urllib.request.urlopen(server.url + "/healthz", timeout=5) as resp:
            assert json.loads(resp.read())["status"] == "ok"
        chat = server.post("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
        assert chat["object"] == "chat.completion"
        resp = server.post("/v1/responses", {"model": "m", "input": "hi"})
        assert resp["status"] == "completed"
        msg = server.post("/v1/messages", {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]})
        assert msg["type"] == "message"
    finally:
        code, err = server.stop()
    assert code == 0
    assert err.count("proxai.request") == 3


def test_server_py_with_config_file(tmp_path, harness, mock):
    doc = harness.default_config()
    doc["providers"]["chat"]["api_key"] = "${PROXAI_TEST_CHAT_KEY}"
    path = write_config(tmp_path, doc)
    os.environ["PROXAI_TEST_CHAT_KEY"] = "sk-from-env"
    try:
        server = ServerProcess(["--config", str(path), "--log-level", "info"])
    finally:
        del os.environ["PROXAI_TEST_CHAT_KEY"]
    try:
        assert f"config file {path}" in server.first_line
        out = server.post("/v1/chat/completions", {"model": "chat/gpt-x", "messages": [{"role": "user", "content": "hi"}]})
        assert out["object"] == "chat.completion"
        assert mock.requests[-1].headers["authorization"] == "Bearer sk-from-env"
        assert mock.requests[-1].body["model"] == "gpt-x"
    finally:
        code, _ = server.stop()
    assert code == 0


def test_server_py_refuses_a_bad_config(tmp_path):
    path = write_config(tmp_path, {"providers": {}})
    proc = subprocess.run([sys.executable, str(ROOT / "server.py"), "--config", str(path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1
    assert f"{path}:1:1: providers: must not be empty" in proc.stderr


def test_proxai_serve_json_logs(tmp_path, harness):
    doc = harness.default_config()
    doc["logging"] = {"format": "json"}
    path = write_config(tmp_path, doc)
    proc = subprocess.Popen([sys.executable, "-m", "proxai.tools.cli", "serve", "--config", str(path), "--port", "0"],
                            cwd=ROOT, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        first = json.loads(proc.stderr.readline())
        assert first["level"] == "info" and "serving config file" in first["msg"]
        url = re.search(r"on (http://\S+)", first["msg"]).group(1)
        req = urllib.request.Request(url + "/v1/messages", data=json.dumps(
            {"model": "anthropic/c", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}).encode())
        with urllib.request.urlopen(req, timeout=10) as resp:
            assert resp.status == 200
        deadline = time.monotonic() + 5
        line = proc.stderr.readline()
        while "request_id" not in line and time.monotonic() < deadline:
            line = proc.stderr.readline()
        summary = json.loads(line)
        assert summary["route"] == "anthropic" and summary["status"] == 200
        assert summary["client_protocol"] == summary["provider_protocol"] == "anthropic_messages"
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=10)
    assert proc.returncode == 0


@pytest.mark.parametrize("args", [["--port", "not-a-number"], ["--log-level", "loud"]])
def test_server_py_rejects_bad_arguments(args):
    proc = subprocess.run([sys.executable, str(ROOT / "server.py"), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 2


def test_non_loopback_bind_without_api_keys_warns(tmp_path):
    server = ServerProcess(["--host", "0.0.0.0"])
    try:
        second = server.proc.stderr.readline()
    finally:
        code, err = server.stop()
    assert code == 0
    assert "WARNING" in second and "non-loopback address 0.0.0.0 without server.api_keys" in second


def test_loopback_bind_does_not_warn():
    server = ServerProcess([])
    code, err = server.stop()
    assert code == 0 and "non-loopback" not in err
