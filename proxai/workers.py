"""``--workers N``: N server processes on one port (SO_REUSEPORT), under one supervisor.

The proxy keeps no state between requests (continuation state rides with the
client), so workers share nothing: the kernel spreads new connections across
them. The supervisor forwards SIGINT/SIGTERM, and restarts a worker that dies
on its own (after a short pause, so a worker that cannot start does not spin).
"""
from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import socket
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
    context = multiprocessing.get_context("fork")
    stopping = False
    procs: dict[int, multiprocessing.Process] = {}

    def start(index: int) -> None:
        proc = context.Process(target=_child, args=(run_worker, index), name=f"proxai-worker-{index}", daemon=False)
        proc.start()
        procs[index] = proc

    def stop(signum, _frame) -> None:
        nonlocal stopping
        stopping = True
        for proc in procs.values():
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGTERM)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        for index in range(count):
            start(index)
        while not stopping:
            for index, proc in list(procs.items()):
                if not proc.is_alive() and not stopping:
                    log.warning("worker %d (pid %s) exited with status %s; restarting", index, proc.pid, proc.exitcode)
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


def _child(run_worker: Callable[[int], int], index: int) -> None:
    # The parent's handlers must not run here: the worker installs its own on its loop.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    raise SystemExit(run_worker(index))
