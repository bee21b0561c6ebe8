"""`GET /readyz`: named readiness checks, all of which must pass for a 200.

`/healthz` says the process is alive; `/readyz` says it should get traffic. A
check is a callable (plain or async) returning None when ready, else a short
reason; it must not raise, and one that does counts as not ready. Parts of the
proxy add their own (`proxy.readiness.add("state_store", ping)`).
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any, Awaitable, Callable

Check = Callable[[], "str | None | Awaitable[str | None]"]

CHECK_TIMEOUT_SECS = 2.0


class Readiness:
    def __init__(self) -> None:
        self.checks: dict[str, Check] = {}

    def add(self, name: str, check: Check) -> None:
        self.checks[name] = check

    def remove(self, name: str) -> None:
        self.checks.pop(name, None)

    async def report(self) -> tuple[bool, dict[str, str]]:
        """(all ready, {check name: "ok" or the reason})."""
        results: dict[str, str] = {}
        for name, check in list(self.checks.items()):
            try:
                outcome: Any = check()
                if inspect.isawaitable(outcome):
                    outcome = await asyncio.wait_for(outcome, CHECK_TIMEOUT_SECS)
            except asyncio.TimeoutError:
                outcome = f"no answer within {CHECK_TIMEOUT_SECS:g}s"
            except Exception as exc:  # a failing check is a not-ready answer, not a 500
                outcome = f"check failed: {type(exc).__name__}"
            results[name] = "ok" if outcome is None else str(outcome)
        return all(v == "ok" for v in results.values()), results
