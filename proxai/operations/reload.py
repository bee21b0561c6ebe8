"""Reload: config and rules replaced as one set, and only once the new set is fully valid.

A `Generation` is everything a request reads from its configuration: the config,
the router built from it and the rules engine. The proxy serves one live
generation; each request pins the generation it started on (a context variable,
so the pin follows the request's task into its stream), and keeps it to the end
even when a reload swaps in another meanwhile.

A reload (SIGHUP, the optional file watch, or `Reloader.reload()`) reads the
config file again, loads the rules it names and builds the router, off the event
loop; any problem is logged and the old generation stays. `prepare()` is also
what startup and `proxai check-config` run, so the three accept exactly the same
files.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from aiohttp import web

import engine

from proxai.routing.config import Config
from proxai.http.errors import ConfigError
from proxai.routing.routes import Router

log = logging.getLogger("proxai.reload")


@dataclass(frozen=True)
class Generation:
    config: Config
    router: Router | None  # None in demo mode until the mock upstreams are up
    engine: engine.Engine
    number: int = 1
    loaded_at: float = 0.0


def prepare(config: Config, *, number: int = 1, with_router: bool = True) -> Generation:
    """Load the rules and build the router for `config`; raises on the first problem."""
    rules = engine.Engine.load(config.rules_dir)
    router = Router(config) if with_router else None
    return Generation(config, router, rules, number, time.time())


_pinned: contextvars.ContextVar[tuple[Any, Generation] | None] = contextvars.ContextVar("proxai.generation", default=None)


def pin(owner: Any) -> contextvars.Token:
    """Pin `owner`'s live generation for the rest of the current request."""
    return _pinned.set((owner, owner.live))


def unpin(token: contextvars.Token) -> None:
    _pinned.reset(token)


def current(owner: Any) -> Generation:
    """The generation the running request pinned, else `owner`'s live one."""
    pinned = _pinned.get()
    if pinned is not None and pinned[0] is owner:
        return pinned[1]
    return owner.live


# An absolute path in a reason (the config file, a rules file, a missing directory).
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:[^\s:'\"/]+/)+([^\s:'\"/]+)")


def short_reason(reason: str, limit: int = 200) -> str:
    """What `/readyz` shows of a failed reload: the reason with every absolute path cut to
    its file name (the probe's answer is no place for the server's layout), at most
    `limit` characters; the whole reason is in the log."""
    reason = _ABSOLUTE_PATH.sub(r"\1", reason)
    return reason if len(reason) <= limit else reason[:limit - 3] + "..."


def describe(exc: BaseException, source: str | None) -> str:
    """A failed reload's reason on one line; a config's problems as `check-config` prints
    them (`FILE:LINE:COL: key.path: message`), joined by "; "."""
    if isinstance(exc, ConfigError):
        return "; ".join(exc.lines())
    return str(exc) or type(exc).__name__


class Reloader:
    """Swaps a proxy's generation. `load_config` reads the config as startup did (the same
    file and command-line overrides); it raises ConfigError on a bad file."""

    def __init__(self, proxy: Any, load_config: Callable[[], Config]):
        self.proxy = proxy
        self.load_config = load_config
        self.last_error: str | None = None
        self.last_attempt: float | None = None
        self._lock = asyncio.Lock()
        self._again = False
        self._task: asyncio.Task | None = None

    async def reload(self) -> bool:
        """One reload; True when the new generation is live. Concurrent calls run one after another."""
        async with self._lock:
            old = self.proxy.live
            self.last_attempt = time.time()
            try:
                config = await asyncio.to_thread(self.load_config)
                new = await asyncio.to_thread(prepare, config, number=old.number + 1,
                                              with_router=old.router is not None)
            except Exception as exc:  # any problem keeps the old set: the server never serves half a reload
                self.last_error = describe(exc, old.config.source)
                if isinstance(exc, ConfigError):  # one problem a line, exactly as check-config and startup show them
                    lines = exc.lines()
                    # One argument per line: the log escapes control characters in arguments only,
                    # so the line breaks must be the format's.
                    log.error("reload failed, still serving generation %d:" + "\n%s" * len(lines), old.number, *lines)
                else:
                    log.error("reload failed, still serving generation %d: %s", old.number, self.last_error)
                return False
            moved = [key for key in ("host", "port") if getattr(config.server, key) != getattr(old.config.server, key)]
            if moved:
                log.warning("server.%s changed: takes effect on restart", " and server.".join(moved))
            self.proxy.swap(new)
            self.last_error = None
            log.info("reloaded config and rules: generation %d (%d providers, %d routes)", new.number,
                     len(config.providers), len(config.routes))
            return True

    def request(self) -> None:
        """Schedule a reload from a signal handler; requests during a reload coalesce into one more."""
        if self._task is not None and not self._task.done():
            self._again = True
            return
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            self._again = False
            await self.reload()
            if not self._again:
                return

    # --- file watch ---------------------------------------------------------------

    def watched_files(self) -> dict[str, float]:
        """mtime of the config file and of every file under its rules_dir."""
        config = self.proxy.live.config
        paths: list[Path] = []
        if config.source:
            paths.append(Path(config.source))
        if config.rules_dir:
            root = Path(config.rules_dir)
            if root.is_dir():
                paths.extend(p for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith("."))
            else:
                paths.append(root)
        out: dict[str, float] = {}
        for p in paths:
            try:
                out[str(p)] = os.stat(p).st_mtime_ns
            except OSError:
                out[str(p)] = -1
        return out

    async def watch(self, interval: float) -> None:
        """Poll the watched files; a change triggers a reload (no extra dependency, works on
        Kubernetes ConfigMap volumes, whose files change by a symlink swap)."""
        seen = self.watched_files()
        while True:
            await asyncio.sleep(interval)
            now = self.watched_files()
            if now == seen:
                continue
            # A file still being written keeps changing: reload once it holds still.
            while True:
                await asyncio.sleep(min(interval, 0.5))
                later = self.watched_files()
                if later == now:
                    break
                now = later
            log.info("config or rules changed on disk; reloading")
            seen = now  # a failed reload waits for the next change
            await self.reload()
            current = self.watched_files()
            if current.keys() != now.keys():  # the new config watches other files: a new baseline
                seen = current


RELOADER_KEY: web.AppKey[Reloader] = web.AppKey("proxai.reloader", Reloader)


def attach(app: web.Application, load_config: Callable[[], Config], *, watch: float | None = None) -> Reloader:
    """Reload `app`'s proxy on SIGHUP (and every `watch` seconds when files changed)."""
    from proxai.http.surface import PROXY_KEY

    reloader = Reloader(app[PROXY_KEY], load_config)
    app[RELOADER_KEY] = reloader
    tasks: list[asyncio.Task] = []

    async def on_startup(_app) -> None:
        loop = asyncio.get_running_loop()
        try:
            loop.add_signal_handler(signal.SIGHUP, reloader.request)
        except (NotImplementedError, RuntimeError, AttributeError, ValueError):  # no SIGHUP (Windows), or not the main thread
            pass
        if watch:
            tasks.append(loop.create_task(reloader.watch(watch)))

    async def on_cleanup(_app) -> None:
        for task in tasks:
            task.cancel()
        try:
            asyncio.get_running_loop().remove_signal_handler(signal.SIGHUP)
        except (NotImplementedError, RuntimeError, AttributeError, ValueError):
            pass

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return reloader

