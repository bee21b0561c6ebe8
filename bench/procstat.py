"""What /proc says about a process tree (CPU time, memory) and about the machine."""

from __future__ import annotations

import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class Sample:
    cpu_s: float  # user + system, summed over the tree
    rss_kb: int  # VmRSS, summed over the tree
    hwm_kb: int  # VmHWM (peak RSS), summed over the tree


def tree(pid: int) -> list[int]:
    """pid and its descendants (a proxy started with workers forks children)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                children = Path(f"/proc/{p}/task/{task}/children").read_text().split()
                todo.extend(int(c) for c in children)
        except OSError:
            continue
    return out


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process (all its threads), from /proc/<pid>/stat."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may contain spaces
    return (int(fields[11]) + int(fields[12])) / TICK


def memory_kb(pid: int) -> tuple[int, int]:
    rss = hwm = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("VmHWM:"):
            hwm = int(line.split()[1])
    return rss, hwm


def sample(pid: int) -> Sample:
    cpu, rss, hwm = 0.0, 0, 0
    for p in tree(pid):
        try:
            cpu += cpu_seconds(p)
            r, h = memory_kb(p)
        except (OSError, ValueError, IndexError):
            continue  # exited between listing and reading
        rss += r
        hwm += h
    return Sample(cpu, rss, hwm)


def machine() -> dict:
    model = platform.processor() or ""
    memory_kb_total = None
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory_kb_total = int(line.split()[1])
                break
    except OSError:
        pass
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_model": model or "unknown",
        "memory_gib": round(memory_kb_total / 1024 / 1024, 1) if memory_kb_total else None,
        "python": sys.version.split()[0],
        "implementation": platform.python_implementation(),
        "kernel": platform.release(),
    }
