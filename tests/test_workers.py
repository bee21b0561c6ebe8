"""`--workers N`: several processes serve one port and stop together."""
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> dict:
    req = urllib.request.Request(url, headers={"Connection": "close"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return json.loads(resp.read())


def test_two_workers_share_one_port_and_stop_on_sigterm(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(ROOT / "server.py"), "--port", str(port), "--workers", "2"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PROXAI_HOME": str(tmp_path)})
    try:
        pids: set = set()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(pids) < 2:
            try:
                pids.add(get(f"http://127.0.0.1:{port}/healthz")["pid"])
            except OSError:
                time.sleep(0.1)
        assert len(pids) == 2, f"answers came from {pids}"
        assert proc.pid not in pids
        # every worker translates too (demo mode: the chat SDK shape through an Anthropic mock)
        body = json.dumps({"model": "anthropic/demo", "messages": [{"role": "user", "content": "hi"}]}).encode()
        for _ in range(4):
            req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=body,
                                         headers={"Content-Type": "application/json", "Connection": "close"})
            with urllib.request.urlopen(req, timeout=5) as resp:
                assert json.loads(resp.read())["object"] == "chat.completion"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    assert "with 2 workers" in out.splitlines()[0]
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
