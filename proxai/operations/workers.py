"""``--workers N``: N server processes on one port (SO_REUSEPORT), under one supervisor.

The proxy keeps no state between requests (continuation state rides with the
client), so workers share nothing: the kernel spreads new connections across
them. The supervisor forwards SIGINT/SIGTERM (and SIGHUP, a reload), and restarts a worker that dies
on its own (after a short pause, so a worker that cannot start does not spin).

Metrics are the exception: the workers write them to files in a private directory the
supervisor creates before the first fork and removes at exit, so that a scrape of any
worker reports the whole instance (proxai/observability/metrics.py).
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import socket
import tempfile
import time
from typing import Callable

log = logging.getLogger("proxai")

RESTART_PAUSE_SECS = 1.0


def resolve_port(host: str, port: int) -> int:
    """Port 0 means "any free port": pick it once so every worker binds the same one."""
    if port:
        return port
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return probe.getsockname()[1]


def supervise(count: int, run_worker: Callable[[int], int], stop_timeout: float = 40.0) -> int:
    """Run ``run_worker(index)`` in ``count`` processes until a signal asks them to stop.

    On the signal every worker gets SIGTERM at once and drains in parallel; one still
    running `stop_timeout` seconds later is killed."""
    from proxai.observability import metrics
    context = multiprocessing.get_context("fork")
    stopping = False
    procs: dict[int, multiprocessing.Process] = {}
    # Fresh for each run: files left by an earlier instance would count again.
    metrics_dir = tempfile.mkdtemp(prefix="proxai-metrics-")

    def start(index: int) -> None:
        proc = context.Process(target=_child, args=(run_worker, index, metrics_dir), name=f"proxai-worker-{index}", daemon=False)
        proc.start()
        procs[index] = proc

    def stop(signum, _frame) -> None:
        nonlocal stopping
        stopping = True
        for proc in procs.values():
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)

    def forward(signum, _frame) -> None:  # SIGHUP: every worker reloads its config and rules
        for proc in procs.values():
            if proc.is_alive():
                os.kill(proc.pid, signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    if hasattr(signal, "SIGHUP"):
        previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, forward)
    try:
        for index in range(count):
            start(index)
        while not stopping:
            for index, proc in list(procs.items()):
                if not proc.is_alive() and not stopping:
                    log.warning("worker %d (pid %s) exited with status %s; restarting", index, proc.pid, proc.exitcode)
                    metrics.mark_dead(metrics_dir, proc.pid)
                    time.sleep(RESTART_PAUSE_SECS)
                    if not stopping:
                        start(index)
            time.sleep(0.2)
        deadline = time.monotonic() + stop_timeout
        for proc in procs.values():  # one shared deadline: the workers stop in parallel
            proc.join(timeout=max(0.0, deadline - time.monotonic()))
        for index, proc in procs.items():
            if proc.is_alive():
                log.warning("worker %d (pid %s) still running %gs after SIGTERM; killing it", index, proc.pid, stop_timeout)
                proc.kill()
                proc.join()
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _child(run_worker: Callable[[int], int], index: int, metrics_dir: str) -> None:
    # The parent's handlers must not run here: the worker installs its own on its loop.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    if hasattr(signal, "SIGHUP"):  # ignored until the worker's loop handles it (a reload)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
    from proxai.observability import metrics
    metrics.share(metrics_dir)
    raise SystemExit(run_worker(index))
