"""`GET /readyz`: named readiness checks; every required one must pass for a 200.

`/healthz` says the process is alive; `/readyz` says this pod should get traffic. A
check is a callable (plain or async) returning None when ready, else a short
reason; it must not raise, and one that does counts as not ready. Parts of the
proxy add their own (`proxy.readiness.add("state_store", ping)`).

A check added with `required=False` watches a dependency shared with other pods
(the Redis state store): when it fails, it shows as `degraded: <reason>` and the
pod stays ready, because taking every replica out of the load balancer at once
would turn an outage of one feature into an outage of all of them.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Awaitable, Callable

Check = Callable[[], "str | None | Awaitable[str | None]"]

CHECK_TIMEOUT_SECS = 2.0
DEGRADED = "degraded: "


class Readiness:
    def __init__(self) -> None:
        self.checks: dict[str, Check] = {}
        self.optional: set[str] = set()

    def add(self, name: str, check: Check, *, required: bool = True) -> None:
        self.checks[name] = check
        if required:
            self.optional.discard(name)
        else:
            self.optional.add(name)

    def remove(self, name: str) -> None:
        self.checks.pop(name, None)
        self.optional.discard(name)

    async def report(self) -> tuple[bool, dict[str, str]]:
        """(every required check passed, {check name: "ok", the reason, or "degraded: " and the reason})."""
        results: dict[str, str] = {}
        ready = True
        for name, check in list(self.checks.items()):
            outcome = await _run(check)
            if outcome is None:
                results[name] = "ok"
            elif name in self.optional:
                results[name] = DEGRADED + outcome
            else:
                results[name] = outcome
                ready = False
        return ready, results


async def _run(check: Check) -> str | None:
    try:
        outcome: Any = check()
        if inspect.isawaitable(outcome):
            outcome = await asyncio.wait_for(outcome, CHECK_TIMEOUT_SECS)
    except asyncio.TimeoutError:
        return f"no answer within {CHECK_TIMEOUT_SECS:g}s"
    except Exception as exc:  # a failing check is a not-ready answer, not a 500
        return f"check failed: {type(exc).__name__}"
    return None if outcome is None else str(outcome)
