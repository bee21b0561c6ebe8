"""Which CPUs the proxy and the load (driver + mock upstream) run on.

The issue's targets are defined with the proxy pinned to one core: its CPU per request is
then its own, not shared with the driver's event loop on the same core, and req/s is what
one core of proxy serves. On a machine with at least two CPUs the bench gives the proxy
(and the workers it forks, which inherit the affinity) the last `proxy_cores` CPUs and
the load the others; with fewer CPUs than that the load shares the proxy's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


def available() -> list[int]:
    if hasattr(os, "sched_getaffinity"):
        return sorted(os.sched_getaffinity(0))
    return list(range(os.cpu_count() or 1))


@dataclass(frozen=True)
class Placement:
    proxy: tuple[int, ...] | None = None  # None: not pinned
    load: tuple[int, ...] | None = None

    @property
    def pinned(self) -> bool:
        return self.proxy is not None

    def describe(self) -> str:
        if not self.pinned:
            return "not pinned (proxy, load driver and mock upstream share every CPU)"
        shared = set(self.proxy) & set(self.load or ())
        text = (f"proxy (and its workers) pinned to CPU {_cpus(self.proxy)}; "
                f"load driver and mock upstream to CPU {_cpus(self.load)}")
        if shared:
            text += f" (sharing CPU {_cpus(sorted(shared))} with the proxy)"
        return text

    def as_dict(self) -> dict:
        return {"proxy": list(self.proxy) if self.proxy else None, "load": list(self.load) if self.load else None,
                "description": self.describe()}


def choose(pin: bool | None, proxy_cores: int = 1) -> Placement:
    """`pin` None: pin when there are at least two CPUs."""
    cpus = available()
    if pin is None:
        pin = len(cpus) >= 2
    if not pin or not hasattr(os, "sched_setaffinity"):
        return Placement()
    proxy_cores = max(1, min(proxy_cores, len(cpus)))
    proxy = tuple(cpus[-proxy_cores:])
    load = tuple(cpus[:-proxy_cores]) or (cpus[0],)
    return Placement(proxy, load)


def pin_child(cpus: tuple[int, ...] | None):
    """A Popen preexec_fn that pins the child, before it runs anything, to `cpus` (None: no pinning)."""
    if not cpus:
        return None
    chosen = set(cpus)

    def pin() -> None:
        os.sched_setaffinity(0, chosen)

    return pin


def calibrate(cpus: tuple[int, ...] | None = None, repeats: int = 5) -> float:
    """Milliseconds of a fixed pure-Python workload on `cpus` (best of `repeats`): how fast the
    proxy's CPU is right now. On a shared or virtual machine it drifts; runs compare only at
    a similar figure."""
    import time

    before = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else None
    if cpus and before is not None:
        os.sched_setaffinity(0, set(cpus))
    try:
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            d: dict = {}
            for i in range(100_000):
                d[str(i)] = i * i
            sum(d.values())
            best = min(best, time.perf_counter() - t0)
        return best * 1000
    finally:
        if cpus and before is not None:
            os.sched_setaffinity(0, before)


def _cpus(cpus) -> str:
    return ",".join(str(c) for c in cpus) if cpus else "-"
