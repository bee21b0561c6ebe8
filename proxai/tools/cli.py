"""The `proxai` command: serve, check-config, lint, docs, translate, capture.

Each subcommand is one `add_parser` call in `_parser()` plus a `_cmd_*`
function returning the exit code, so more commands slot in the same way.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import signal
import sys
from typing import Sequence

from proxai import __version__

from proxai.http import origin
from proxai.routing.config import CAPTURE_PHASES, DEFAULT_HOST, DEFAULT_PORT
from proxai.http.errors import ConfigError

log = logging.getLogger("proxai")


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not getattr(args, "command", None):
        _parser().print_help(sys.stderr)
        return 2
    return args.func(args)


def serve_main(argv: Sequence[str]) -> int:
    """`python server.py ...`: the serve subcommand without its name."""
    parser = argparse.ArgumentParser(prog="server.py", description="Run the ProxAI server.")
    _add_serve_args(parser)
    return _cmd_serve(parser.parse_args(argv))


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="proxai", description="ProxAI: translate between LLM API protocols.")
    parser.add_argument("--version", action="version", version=f"proxai {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    serve = sub.add_parser("serve", help="run the proxy server (demo mode without --config)")
    _add_serve_args(serve)
    serve.set_defaults(func=_cmd_serve)

    check = sub.add_parser("check-config", help="validate a config file; prints FILE:LINE:COL: key.path: message per problem")
    check.add_argument("file", metavar="FILE")
    check.set_defaults(func=_cmd_check_config)

    lint = sub.add_parser("lint", help="validate rule files; prints file:line for each problem")
    lint.add_argument("dirs", nargs="*", metavar="RULES_DIR")
    lint.add_argument("--migrate", action="store_true", help="rewrite the v1 idioms of RULES_DIR in place, keeping comments")
    lint.add_argument("--write-schema", action="store_true",
                      help="maintainers: regenerate schemas/templates.schema.json from the construct registry")
    lint.set_defaults(func=_cmd_lint)

    docs = sub.add_parser("docs", help="maintainers: regenerate docs/generated/ from the rule files and the config schema")
    docs.add_argument("--check", action="store_true",
                      help="write nothing; exit 1 naming each generated file that differs from the rules")
    docs.set_defaults(func=_cmd_docs)

    translate = sub.add_parser(
        "translate", help="dry-run one request, response or recorded stream through the translation rules",
        description="Translate one payload offline with the same rules the server uses. --from is the protocol "
                    "the file is written in, --to the one to produce.",
    )
    try:
        from proxai.tools import dryrun
    except ImportError as exc:  # the engine is missing: the command says so instead of breaking the CLI
        translate.add_argument("rest", nargs=argparse.REMAINDER)
        translate.set_defaults(func=lambda _args, why=str(exc): _unavailable("translate", why))
    else:
        dryrun.add_arguments(translate)
        translate.set_defaults(func=_cmd_translate)

    cap = sub.add_parser("capture", help="read captured requests ($PROXAI_HOME/captures, default ~/.proxai/captures)")
    cap_sub = cap.add_subparsers(dest="capture_command", metavar="ACTION", required=True)
    show = cap_sub.add_parser("show", help="print the captured phases of one request")
    show.add_argument("request_id", metavar="REQUEST_ID")
    show.add_argument("--layout", choices=["auto", "side", "stacked"], default="auto",
                      help="side by side (inbound|provider, upstream|outbound) or one after another; "
                           "auto: side by side on terminals at least 140 columns wide")
    show.add_argument("--width", type=int, help="layout width (default: the terminal's)")
    show.add_argument("--raw", metavar="PHASE", help="print one phase's file exactly as captured")
    show.set_defaults(func=_cmd_capture_show)
    lst = cap_sub.add_parser("list", help="list captured requests, newest first")
    lst.add_argument("-n", type=int, default=20, metavar="N", help="at most N requests (default 20; 0 = all)")
    lst.set_defaults(func=_cmd_capture_list)
    return parser


def _add_serve_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="FILE", help="config file (YAML); without it: demo mode with built-in mock upstreams")
    parser.add_argument("--host", help=f"address to bind (default: server.host, else {DEFAULT_HOST})")
    parser.add_argument("--port", type=int, help=f"port to bind (default: server.port, else {DEFAULT_PORT}; 0 = any free port)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="overrides logging.level")
    parser.add_argument("--log-format", choices=["human", "json"], help="overrides logging.format")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="run N server processes on the same port (SO_REUSEPORT); default 1")
    parser.add_argument("--watch", metavar="SECS", type=float, nargs="?", const=2.0,
                        help="reload config and rules when the config file or rules_dir changes, polling every "
                             "SECS seconds (default 2); SIGHUP reloads too")
    parser.add_argument("--capture", metavar="PHASES", type=_capture_phases,
                        help="overrides the capture: section: all, none, or a comma list of inbound_request, "
                             "provider_request, upstream_response, outbound_response")
    parser.add_argument("--inspector", action="store_true",
                        help="serve the translation inspector at /_proxai/ (sets server.inspector.enabled)")


def _capture_phases(text: str) -> dict[str, bool]:
    from proxai.observability.capture import parse_phases

    try:
        return parse_phases(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


# --- serve ---------------------------------------------------------------------------


def _cmd_serve(args: argparse.Namespace) -> int:
    from proxai.observability import logs
    from proxai.http.app import PROXY_KEY, build_app, demo_config, with_server
    from proxai.routing.config import load_file

    def load_config():
        """The config as this command line gives it: file, then overrides (reload reads it the same way)."""
        loaded = load_file(args.config) if args.config else demo_config("http://127.0.0.1:0")
        loaded = with_server(loaded, args.host, args.port)
        if args.capture is not None:
            loaded = dataclasses.replace(loaded, capture=args.capture)
        if args.inspector:
            inspector = dataclasses.replace(loaded.server.inspector, enabled=True)
            loaded = dataclasses.replace(loaded, server=dataclasses.replace(loaded.server, inspector=inspector))
        return loaded

    try:
        config = load_config()
    except ConfigError as exc:
        _print_problems(exc)
        return 1
    logs.setup(args.log_level or config.log_level, args.log_format or config.log_format)
    if args.workers < 1:
        print("proxai: --workers must be at least 1", file=sys.stderr)
        return 2

    def build():
        from proxai.operations import reload
        app = build_app(config if args.config else None, server=config.server, capture_phases=config.capture)
        live = app[PROXY_KEY]
        # Demo mode has no file: a reload re-reads the rules for the same mock routes.
        reload.attach(app, load_config if args.config else (lambda: live.live.config), watch=args.watch)
        return app

    try:
        app = build()  # also checks, before any worker starts, that the rules load
    except Exception as exc:  # the user's override rules failed to load
        print(f"proxai: cannot start: {exc}", file=sys.stderr)
        return 1
    if args.workers == 1:
        try:
            return _run(_serve(app, config.server.host, config.server.port, args.config))
        except KeyboardInterrupt:
            return 0
    from proxai.operations import workers
    port = workers.resolve_port(config.server.host, config.server.port)
    mode = f"config file {args.config}" if args.config else "demo mode (built-in mock upstreams, no API keys needed)"
    log.info("ProxAI %s serving %s on http://%s:%d with %d workers", __version__, mode, _url_host(config.server.host),
             port, args.workers)
    del app  # each worker builds its own app after the fork

    def run_worker(index: int) -> int:
        return _run(_serve(build(), config.server.host, port, args.config, reuse_port=True))

    # A worker drains for up to shutdown_timeout_secs, then needs a moment to end its streams.
    return workers.supervise(args.workers, run_worker, stop_timeout=config.server.shutdown_timeout_secs + 10)


def _run(coro) -> int:
    """Run the server loop: uvloop when it is installed (the `fast` extra), else asyncio's."""
    if os.environ.get("PROXAI_EVENT_LOOP", "auto") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            return uvloop.run(coro)
    return asyncio.run(coro)


async def _serve(app, host: str, port: int, config_file: str | None, reuse_port: bool = False) -> int:
    from proxai.http.app import PROXY_KEY, make_runner

    from proxai.http import serving
    from proxai.state import StateError

    serving.install_fd_exhaustion_log(asyncio.get_running_loop())
    fd_watch = asyncio.ensure_future(serving.watch_fds())
    from proxai.state import StateError

    runner = make_runner(app)
    try:
        await runner.setup()
    except StateError as exc:
        fd_watch.cancel()
        print(f"proxai: the state store cannot open: {exc}", file=sys.stderr)
        return 1
    try:
        from aiohttp import web

        site = web.TCPSite(runner, host, port, reuse_port=reuse_port or None)
        try:
            await site.start()
        except OSError as exc:
            print(f"proxai: cannot listen on {host}:{port}: {exc.strerror or exc}", file=sys.stderr)
            return 1
        # Before the first log line, which tells a supervisor the server is up.
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                loop.add_signal_handler(sig, stop.set)
            except (NotImplementedError, RuntimeError):
                pass
        bound_host, bound_port = runner.addresses[0][:2]
        url = f"http://{_url_host(bound_host)}:{bound_port}"
        proxy = app[PROXY_KEY]
        if reuse_port:
            log.info("worker pid %d serving on %s", os.getpid(), url)
        elif config_file:
            log.info("ProxAI %s serving config file %s on %s", __version__, config_file, url)
        else:
            log.info("ProxAI %s serving demo mode (built-in mock upstreams, no API keys needed) on %s", __version__, url)
        if proxy.recorder is not None:
            log.warning("capturing %s to %s (files hold prompts and responses; not API keys)",
                        ", ".join(p for p in CAPTURE_PHASES if p in proxy.recorder.phases), proxy.recorder.root)
        if proxy.inspector is not None and not reuse_port:
            log.info("inspector at %s/_proxai/ (keeps the last %d requests in memory, prompts included)",
                     url, proxy.config.server.inspector.max_requests)
        if proxy.config.continuation_secret is None and not proxy.demo and not reuse_port:
            log.warning(
                "continuation.secret is not set: continuation envelopes are not signed and derived prompt_cache_key "
                "values are keyed with a public built-in constant; set one for a shared deployment"
            )
        if not proxy.config.server.api_keys and not origin.loopback_listener(host):
            log.warning(
                "listening on non-loopback address %s without server.api_keys: anyone who can reach it can use your providers",
                host,
            )
        await stop.wait()
        log.info("shutting down")
        return 0
    finally:
        fd_watch.cancel()
        await runner.cleanup()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


# --- check-config --------------------------------------------------------------------------


def _cmd_check_config(args: argparse.Namespace) -> int:
    from proxai.operations import reload
    from proxai.routing.config import load_file

    try:
        config = load_file(args.file)
    except ConfigError as exc:
        _print_problems(exc)
        return 1
    try:
        reload.prepare(config)  # the rules and router, exactly as `serve` and a reload build them
    except Exception as exc:
        where = f"rules_dir {config.rules_dir}: " if config.rules_dir else "rules: "
        print(f"{args.file}: {where}{exc}", file=sys.stderr)
        return 1
    print(f"{args.file}: ok ({len(config.providers)} providers, {len(config.routes)} routes)")
    from proxai.routing.pools import Pools

    for line in Pools(config).describe(config):
        print("  " + line)
    return 0


def _print_problems(exc: ConfigError) -> None:
    """`FILE:LINE:COL: key.path: message`, one line per problem, in file order."""
    for line in exc.lines():
        print(line, file=sys.stderr)


# --- lint --------------------------------------------------------------------------------------


def _cmd_lint(args: argparse.Namespace) -> int:
    try:
        from engine.lint import main as lint_main
    except ImportError as exc:
        print(f"proxai lint: the rules linter is not available ({exc})", file=sys.stderr)
        return 2
    flags = [flag for flag, on in (("--migrate", args.migrate), ("--write-schema", args.write_schema)) if on]
    return int(lint_main(flags + list(args.dirs)) or 0)


def _cmd_docs(args: argparse.Namespace) -> int:
    from proxai.tools.docsgen import main as docs_main

    return docs_main(check=args.check)


# --- translate -----------------------------------------------------------------------------------


def _unavailable(command: str, why: str) -> int:
    print(f"proxai {command}: the translation engine is not available ({why})", file=sys.stderr)
    return 2


def _cmd_translate(args: argparse.Namespace) -> int:
    from proxai.tools import dryrun
    try:
        return dryrun.run(args)
    except OSError as exc:
        print(f"proxai translate: cannot read {exc.filename or args.file}: {exc.strerror or exc}", file=sys.stderr)
        return 2


# --- capture ---------------------------------------------------------------------------------------


def _cmd_capture_show(args: argparse.Namespace) -> int:
    from proxai.observability import capture, capture_view
    from proxai.http import requestid
    if not requestid.is_safe(args.request_id):
        print(f"proxai capture show: {args.request_id!r} is not a request id (letters, digits, . _ - only)",
              file=sys.stderr)
        return 2
    if args.raw:
        if args.raw not in capture.PHASES:
            print(f"proxai capture show: unknown phase {args.raw!r} (one of {', '.join(capture.PHASES)})", file=sys.stderr)
            return 2
        path = capture.file_path(capture.directory(), args.request_id, args.raw)
        if not path.is_file():
            print(f"proxai capture show: no {args.raw} capture for {args.request_id} in {capture.directory()}", file=sys.stderr)
            return 1
        sys.stdout.buffer.write(path.read_bytes())
        return 0
    phases = capture.load(args.request_id)
    if not phases:
        print(f"proxai capture show: no capture for request {args.request_id} in {capture.directory()}", file=sys.stderr)
        return 1
    sys.stdout.write(capture_view.render(args.request_id, phases, args.layout, args.width))
    return 0


def _cmd_capture_list(args: argparse.Namespace) -> int:
    import time

    from proxai.observability import capture
    rows = capture.list_requests()
    if not rows:
        print(f"no captures in {capture.directory()}", file=sys.stderr)
        return 0
    table = []
    for rid, mtime, phases in rows[: args.n or None]:
        s = capture.read_summary(rid)
        duration = s.get("duration_ms")
        table.append((
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime)), rid, s.get("method") or "-",
            s.get("path") or "-", s.get("model") or "-", str(s.get("status") or "-"),
            f"{duration:.1f}ms" if isinstance(duration, (int, float)) else "-", " ".join(phases),
        ))
    # time, id, method, path, model, status, duration, phases: aligned columns, phases last
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]) - 1)]
    for row in table:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)) + "  " + row[-1])
    return 0


if __name__ == "__main__":
    sys.exit(main())
