"""The bench's three processes: mock upstream, proxy under test, load driver."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import orjson
import yaml

from bench.payloads import ANTHROPIC, PROTOCOLS, SHORT
from bench import procstat
from bench.placement import pin_child

ROOT = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
BENCH_KEY = "bench-key"  # not a secret: the mock upstream accepts anything


def _env() -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("http_proxy", None)
    env.pop("HTTP_PROXY", None)  # the proxy's client session trusts the environment
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen | None, timeout: float = 10.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)


def spawn_listening(cmd: list[str], cpus: tuple[int, ...] | None, what: str) -> tuple[subprocess.Popen, int]:
    """Start a bench process that prints `PORT <n>` once it listens: the process and its port."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, text=True, preexec_fn=pin_child(cpus))
    line = proc.stdout.readline()
    if not line.startswith("PORT "):
        stop(proc)
        raise RuntimeError(f"{what} did not start (said {line!r})")
    return proc, int(line.split()[1])


class Upstream:
    def __init__(self, deltas: int, events_per_write: int = 1, gap_ms: float = 0.0,
                 cpus: tuple[int, ...] | None = None, hold_after: int = 0, latency_ms: float = 0.0):
        cmd = [PYTHON, "-m", "bench.upstream", "--port", "0", "--deltas", str(deltas),
               "--events-per-write", str(events_per_write), "--gap-ms", str(gap_ms), "--hold-after", str(hold_after),
               "--latency-ms", str(latency_ms)]
        self.proc, self.port = spawn_listening(cmd, cpus, "the bench upstream")
        self.url = f"http://127.0.0.1:{self.port}"
        self.pid = self.proc.pid

    def close(self) -> None:
        stop(self.proc)


class Floor:
    """bench/floor.py in front of the upstream: `processes` of it on one port (SO_REUSEPORT when more
    than one, as the proxy's workers share theirs), pinned like the proxy."""

    def __init__(self, upstream_url: str, cpus: tuple[int, ...] | None = None, processes: int = 1):
        port = free_port() if processes > 1 else 0
        self.procs = []
        try:
            for _ in range(processes):
                cmd = [PYTHON, "-m", "bench.floor", "--upstream", upstream_url, "--port", str(port)]
                if processes > 1:
                    cmd.append("--reuse-port")
                proc, port = spawn_listening(cmd, cpus, "the floor relay")
                self.procs.append(proc)
        except BaseException:
            self.close()
            raise
        self.port = port
        self.url = f"http://127.0.0.1:{port}"
        self.pids = [p.pid for p in self.procs]
        self.pid = self.pids[0]

    def sample(self) -> procstat.Sample:
        samples = [procstat.sample(pid) for pid in self.pids]
        return procstat.Sample(sum(s.cpu_s for s in samples), sum(s.rss_kb for s in samples),
                               sum(s.hwm_kb for s in samples))

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.procs)

    def close(self) -> None:
        for proc in self.procs:
            stop(proc)


def proxy_config(upstream_url: str, port: int, log_level: str, state: dict | None = None) -> dict:
    """One provider per protocol on the bench upstream; model `<chat|responses|anthropic>/<name>`
    selects the provider and reaches it as `<name>`."""
    providers = {}
    for protocol in PROTOCOLS:
        providers[SHORT[protocol]] = {
            "protocol": protocol,
            "base_url": upstream_url if protocol == ANTHROPIC else upstream_url + "/v1",
            "api_key": BENCH_KEY,
        }
    routes = [
        {"name": f"to-{SHORT[p]}", "model_pattern": f"^{SHORT[p]}/(.+)$", "match_kind": "regex",
         "provider": SHORT[p], "upstream_model": "$1"}
        for p in PROTOCOLS
    ]
    config = {
        # above any bench concurrency, so admission control never answers 503 here
        "server": {"host": "127.0.0.1", "port": port, "max_concurrent_requests": 4096},
        "providers": providers,
        "routing": {"routes": routes},
        "logging": {"level": log_level},
    }
    if state is not None:
        config["state"] = state
    return config


class Proxy:
    """server.py --config <generated> --port <free>, timed from spawn to a healthy /healthz."""

    def __init__(self, upstream_url: str, workdir: Path, log_level: str = "info", extra_args: str = "",
                 profile_to: Path | None = None, startup_timeout: float = 30.0, state: dict | None = None,
                 cpus: tuple[int, ...] | None = None, config: dict | None = None, wrapper: list[str] | None = None):
        """`cpus`: pin the proxy and the workers it forks to these CPUs. `config`: the config to run
        (its server.port is set here), instead of proxy_config(...). `wrapper`: interpreter arguments
        that run server.py under another module (`-m bench.memprobe ...`)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config_file = workdir / "proxy-config.yaml"
        if config is None:
            config = proxy_config(upstream_url, self.port, log_level, state)
        else:
            config = {**config, "server": {**config.get("server", {}), "port": self.port}}
        self.config_file.write_text(yaml.safe_dump(config, sort_keys=False))
        self.log_file = workdir / "proxy.log"
        self.log = open(self.log_file, "wb")
        cmd = [PYTHON]
        if profile_to is not None:
            cmd += ["-m", "pyinstrument", "--renderer", "pyisession", "--outfile", str(profile_to)]
        elif wrapper:
            cmd += list(wrapper)
        cmd += [str(ROOT / "server.py"), "--config", str(self.config_file), "--port", str(self.port)]
        cmd += shlex.split(extra_args)
        self.command = cmd
        started = time.perf_counter()
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=_env(), stdout=self.log, stderr=subprocess.STDOUT,
                                     preexec_fn=pin_child(cpus))
        self.pid = self.proc.pid
        self.startup_s = self._wait_healthy(started, startup_timeout)

    def _wait_healthy(self, started: float, timeout: float) -> float:
        deadline = started + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the proxy exited with {self.proc.returncode} at startup:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.url + "/healthz", timeout=1) as resp:
                    if resp.status == 200:
                        return time.perf_counter() - started
            except OSError:
                pass
            time.sleep(0.005)
        self.close()
        raise RuntimeError(f"the proxy was not healthy within {timeout:g}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 20) -> str:
        try:
            if not self.log.closed:
                self.log.flush()
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def sample(self) -> procstat.Sample:
        return procstat.sample(self.pid)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        stop(self.proc, timeout=30.0)  # a profiled proxy writes its report on the way out
        self.log.close()


class Driver:
    """The load driver process; `run(job)` sends one job and waits for its result."""

    def __init__(self, cpus: tuple[int, ...] | None = None):
        self.proc = subprocess.Popen([PYTHON, "-m", "bench.driver"], cwd=ROOT, env=_env(),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, preexec_fn=pin_child(cpus))

    def run(self, job: dict) -> dict:
        self.proc.stdin.write(orjson.dumps(job) + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the load driver exited ({self.proc.poll()})")
        return orjson.loads(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                stop(self.proc)
