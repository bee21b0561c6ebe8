"""Config problems as `FILE:LINE:COL: key.path: message`: the same lines from check-config,
startup and a reload, each placed at its YAML node, with "did you mean" for near misses."""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

from proxai.routing.config import load_file
from proxai.http.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent

GOOD = """\
providers:
  anthropic:
    protocol: anthropic_messages
    base_url: http://127.0.0.1:9
    api_key: sk-never-echoed
"""

BAD = """\
server:
  port: eighty
  max_concurrent_request: 10
providers:
  anthropic:
    protocol: anthropic_messages
    base_url: http://127.0.0.1:9
    api_key: sk-never-echoed
  openai:
    base_url: http://127.0.0.1:9/v1
    api_key: sk-also-secret
routing:
  default_providers:
    openai_responses: opnai
  routes:
    - name: claude
      model_pattern: "claude-*"
      provider: antropic
"""

# One line per problem, in file order; the missing key points at the mapping that lacks it.
BAD_LINES = [
    "{f}:2:3: server.port: must be of type integer (got str)",
    "{f}:3:3: server.max_concurrent_request: unknown key (did you mean max_concurrent_requests?)",
    "{f}:9:3: providers.openai.protocol: required key is missing",
    "{f}:14:5: routing.default_providers.openai_responses: unknown provider 'opnai' (did you mean openai?)",
    "{f}:18:7: routing.routes[0].provider: unknown provider 'antropic' (did you mean anthropic?)",
]


def expected(path: Path) -> list[str]:
    return [line.format(f=path) for line in BAD_LINES]


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "proxai.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def errors_of(path: Path) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_file(path)
    return info.value


def test_every_problem_is_one_line_at_its_node_with_did_you_mean(tmp_path):
    path = write(tmp_path, BAD)
    err = errors_of(path)
    assert err.lines() == expected(path)
    assert str(err) == "\n".join(expected(path))
    # still (path, message) pairs to whoever reads them as such
    assert dict(err.problems)["server.max_concurrent_request"] == "unknown key"
    assert "sk-never-echoed" not in str(err) and "sk-also-secret" not in str(err)


def test_fallbacks_and_balanced_providers_name_the_near_miss(tmp_path):
    path = write(tmp_path, GOOD + """\
routing:
  routes:
    - model_pattern: "a*"
      providers: [anthropic, anthropc]
    - model_pattern: "b*"
      provider: anthropic
      fallbacks:
        - provider: zzz
""")
    assert errors_of(path).lines() == [
        f"{path}:9:30: routing.routes[0].providers[1]: unknown provider 'anthropc' (did you mean anthropic?)",
        f"{path}:13:11: routing.routes[1].fallbacks[0]: unknown provider 'zzz'",
    ]


def test_a_secret_of_the_wrong_type_is_placed_but_not_echoed(tmp_path):
    path = write(tmp_path, GOOD.replace("api_key: sk-never-echoed", "api_key: [sk-never-echoed]"))
    (line,) = errors_of(path).lines()
    assert line.startswith(f"{path}:5:5: providers.anthropic.api_key: ") and "sk-never-echoed" not in line


def test_an_unclosed_quote_is_reported_where_it_opened(tmp_path):
    path = write(tmp_path, 'server:\n  host: "127.0.0.1\n  port: 8080\n' + GOOD)
    assert errors_of(path).lines() == [
        f"{path}:2:9: unclosed quote (the parser gave up at line 9, column 1: found unexpected end of stream)",
    ]


def test_an_unclosed_quote_closed_by_a_later_one_is_still_placed_at_its_opening(tmp_path):
    path = write(tmp_path, GOOD + 'routing:\n  routes:\n    - model_pattern: "claude-*\n      provider: anthropic\n'
                                  '    - model_pattern: "gpt-*"\n      provider: anthropic\n')
    (line,) = errors_of(path).lines()
    assert line.startswith(f"{path}:8:22: unclosed quote? the quoted scalar opened here runs to line 10")
    assert "the parser gave up at line 10" in line


def test_other_syntax_errors_say_where_the_parser_gave_up(tmp_path):
    path = write(tmp_path, "server:\n  port: 1\nserver:\n  port: 2\n")
    assert errors_of(path).lines() == [f"{path}:3:1: duplicate key 'server'"]


def test_the_file_name_is_given_once(tmp_path):
    missing = tmp_path / "nope.yaml"
    assert errors_of(missing).lines() == [f"{missing}: cannot read config file: No such file or directory"]


# --- the same lines from every command ---------------------------------------------------------


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_check_config_prints_exactly_those_lines(tmp_path):
    path = write(tmp_path, BAD)
    proc = run("-m", "proxai.tools.cli", "check-config", str(path))
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == expected(path)
    assert proc.stdout == ""


def test_the_server_refuses_to_start_with_those_lines(tmp_path):
    path = write(tmp_path, BAD)
    proc = run(str(ROOT / "server.py"), "--config", str(path), "--port", "0")
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == expected(path)


class Lines:
    """A process's stderr read on a thread, so a missing line fails the test instead of hanging it."""

    def __init__(self, proc: subprocess.Popen):
        self.queue: queue.Queue[str] = queue.Queue()
        self.seen: list[str] = []
        self.thread = threading.Thread(target=lambda: [self.queue.put(line) for line in proc.stderr], daemon=True)
        self.thread.start()

    def next(self, timeout: float = 20) -> str:
        try:
            line = self.queue.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("no more output; so far:\n" + "".join(self.seen)) from None
        self.seen.append(line)
        return line.rstrip("\n")

    def until(self, pattern: str, timeout: float = 20) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.next(max(deadline - time.monotonic(), 0.01)))
            if m:
                return m

    def all(self) -> str:
        """Everything the process wrote, once it has exited."""
        self.thread.join(10)
        while not self.queue.empty():
            self.seen.append(self.queue.get())
        return "".join(self.seen)


def test_a_sighup_reload_of_a_bad_file_logs_those_lines(tmp_path):
    path = write(tmp_path, GOOD)
    proc = subprocess.Popen([sys.executable, str(ROOT / "server.py"), "--config", str(path), "--port", "0"],
                            cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stderr=subprocess.PIPE, text=True)
    out = Lines(proc)
    try:
        url = out.until(r"on (http://\S+)").group(1)
        path.write_text(BAD, encoding="utf-8")
        proc.send_signal(signal.SIGHUP)
        out.until(r"reload failed, still serving generation 1:$")
        assert [out.next() for _ in BAD_LINES] == expected(path)
        with urllib.request.urlopen(url + "/readyz", timeout=10) as resp:
            reason = json.loads(resp.read())["last_reload_error"]
        # /readyz: the same lines, joined, with the file's directory cut off
        assert reason.startswith("; ".join(line.format(f="proxai.yaml") for line in BAD_LINES)[:150])
        assert str(tmp_path) not in reason
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
    assert "sk-never-echoed" not in out.all()
