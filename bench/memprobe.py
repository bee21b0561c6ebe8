"""Run server.py with a tracemalloc probe: each SIGUSR1 writes what Python allocated since the first.

    python -X tracemalloc=1 -m bench.memprobe --out DIR server.py --config ... [server args]

The first SIGUSR1 takes the baseline snapshot; each later one writes
`DIR/tracemalloc-<pid>-<k>.json`: the allocations still alive that grew since the baseline,
by file and line and by file, largest first. bench/idle.py uses it to say where the memory
of an open stream goes. Tracing slows the process down: its timings mean nothing.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import tracemalloc
from pathlib import Path

import orjson

TOP = 40


def _stats(diff, limit: int) -> list[dict]:
    out = []
    for stat in diff[:limit]:
        frame = stat.traceback[0]
        out.append({"where": f"{_short(frame.filename)}:{frame.lineno}", "kib": stat.size_diff / 1024,
                    "blocks": stat.count_diff})
    return out


def _short(path: str) -> str:
    for marker in ("site-packages/", "lib/python3", "/proxai/", "/engine/", "/bench/"):
        at = path.find(marker)
        if at >= 0:
            return path[at:].removeprefix("site-packages/")
    return os.path.basename(path)


def install(out: Path) -> None:
    state: dict = {"baseline": None, "k": 0}

    def on_signal(signum, frame):
        if not tracemalloc.is_tracing():
            return
        snapshot = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen importlib._bootstrap>")])
        if state["baseline"] is None:
            state["baseline"] = snapshot
            return
        state["k"] += 1
        by_line = snapshot.compare_to(state["baseline"], "lineno")
        by_file = snapshot.compare_to(state["baseline"], "filename")
        by_trace = snapshot.compare_to(state["baseline"], "traceback") if tracemalloc.get_traceback_limit() > 1 else []
        report = {
            "pid": os.getpid(),
            "total_kib": sum(s.size_diff for s in by_file) / 1024,
            "total_blocks": sum(s.count_diff for s in by_file),
            "by_line": _stats(by_line, TOP),
            "by_file": _stats(by_file, TOP),
            "by_traceback": [{"kib": t.size_diff / 1024, "blocks": t.count_diff,
                              "frames": [f"{_short(f.filename)}:{f.lineno}" for f in t.traceback]}
                             for t in by_trace[:15]],
        }
        path = out / f"tracemalloc-{os.getpid()}-{state['k']}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(orjson.dumps(report))
        tmp.rename(path)  # whole or absent: the reader polls for it

    signal.signal(signal.SIGUSR1, on_signal)


def main() -> None:
    args = sys.argv[1:]
    if len(args) < 3 or args[0] != "--out":
        sys.exit("usage: python -X tracemalloc=1 -m bench.memprobe --out DIR server.py [args]")
    out, script, rest = Path(args[1]), args[2], args[3:]
    out.mkdir(parents=True, exist_ok=True)
    install(out)
    sys.argv = [script, *rest]
    sys.path.insert(0, str(Path(script).resolve().parent))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
