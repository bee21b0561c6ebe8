"""The real server in a child process (`server.py --config ...`), for tests that need its
own signals, resource limits, file descriptors and memory."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(self, tmp_path: Path, config: dict, *, workers: int = 1, nofile: int | None = None):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp_path / f"server-{self.port}.log"
        cfg = tmp_path / f"proxai-{self.port}.yaml"
        cfg.write_text(yaml.safe_dump(config, sort_keys=False))

        def limit() -> None:
            if nofile is not None:
                resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

        self._log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "server.py"), "--config", str(cfg), "--port", str(self.port),
             "--log-format", "json", "--workers", str(workers)],
            cwd=tmp_path, stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=limit,
            env={**os.environ, "PROXAI_HOME": str(tmp_path)},
        )
        self.wait_ready()

    def wait_ready(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text()}")
            try:
                self.get("/healthz")
                return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("server did not start")

    def get(self, path: str, timeout: float = 5) -> bytes:
        req = urllib.request.Request(self.url + path, headers={"Connection": "close"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.read()

    def records(self) -> list[dict]:
        out = []
        for line in self.log_path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append({"msg": line})
        return out

    def request_records(self) -> list[dict]:
        return [r for r in self.records() if r.get("logger") == "proxai.request"]

    def request_records_of(self, path: str, count: int = 1, timeout: float = 5.0) -> list[dict]:
        """The request records of `path`, once there are `count` of them (or after `timeout`): a
        stream's record is written as it ends, which can be just after the client read its last event."""
        deadline = time.monotonic() + timeout
        while True:
            found = [r for r in self.request_records() if r.get("path") == path]
            if len(found) >= count or time.monotonic() > deadline:
                return found
            time.sleep(0.02)

    # /proc views of the serving process (single-worker mode)
    def status(self, field: str) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
        raise KeyError(field)

    def fds(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def sockets(self) -> list[tuple[int, int]]:
        """(local port, remote port) of each TCP socket the process holds (remote 0: listening)."""
        inodes = set()
        for fd in os.listdir(f"/proc/{self.proc.pid}/fd"):
            try:
                target = os.readlink(f"/proc/{self.proc.pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        out = []
        for table in ("tcp", "tcp6"):
            try:
                lines = Path(f"/proc/{self.proc.pid}/net/{table}").read_text().splitlines()[1:]
            except OSError:
                continue
            for line in lines:
                parts = line.split()
                if parts[9] in inodes:
                    out.append((int(parts[1].rsplit(":", 1)[1], 16), int(parts[2].rsplit(":", 1)[1], 16)))
        return out

    def in_flight(self) -> float:
        for line in self.get("/metrics").decode().splitlines():
            if line.startswith("proxai_requests_in_flight "):
                return float(line.split()[1])
        raise KeyError("proxai_requests_in_flight")

    def terminate(self) -> None:
        self.proc.send_signal(signal.SIGTERM)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
