"""Medians over rounds, proxy/direct ratios, the issue's targets, and the markdown report."""

from __future__ import annotations

import statistics

from bench import micro
from bench import startup as startup_bench
from bench.payloads import PROTOCOLS, SHORT

# The targets of the performance issue, step 2 (proxy pinned to one core, medians over rounds,
# against direct in the same run). Stream targets are for ~200-event upstream streams.
TRANSLATED_CPU_MS = 0.40  # proxy CPU per translated non-streaming request
ADDED_P50_MS = 0.6  # added p50 latency at concurrency 1, translated non-streaming
RPS_AT_16 = 2500  # translated non-streaming req/s at concurrency 16
THROUGHPUT_C = 16
TRANSLATED_STREAM_MS = 2.5  # proxy CPU per translated 200-event stream
PASSTHROUGH_STREAM_MS = 1.5  # proxy CPU per pass-through 200-event stream
ADDED_TTFB_MS = 0.5  # time to first event over direct, streams at concurrency 1
PASSTHROUGH_CPU_MS = 0.30  # proxy CPU per pass-through non-streaming request
STARTUP_S = 1.0
# Step 3: ratios to the floor relay (bench/floor.py) measured in the same run, proxy pinned to one core.
FLOOR_TARGETS = (  # (label, mode, passthrough, figure, at most this × the floor's)
    ("pass-through request CPU", "json", True, "cpu_ms", 1.3),
    ("pass-through 200-event stream CPU", "stream", True, "cpu_ms", 1.3),
    ("translated request CPU", "json", False, "cpu_ms", 1.6),
    ("translated 200-event stream CPU", "stream", False, "cpu_ms", 2.0),
    ("pass-through time to first event", "stream", True, "ttfb_p50", 1.1),
    ("translated time to first event", "stream", False, "ttfb_p50", 1.1),
)
MEMORY_GROWTH = 0.05  # "flat": RSS after the last round within 5% of RSS after the first


def _get(run: dict, path: str):
    value = run
    for key in path.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(key)
    return value


def median_of(runs: list[dict], path: str) -> float | None:
    values = [v for v in (_get(r, path) for r in runs) if isinstance(v, (int, float))]
    return statistics.median(values) if values else None


def summarize(runs: list[dict]) -> dict:
    return {
        "rounds": len(runs),
        "requests": sum(r.get("requests", 0) for r in runs),
        "errors": sum(r.get("errors", 0) for r in runs),
        "first_error": next((r["first_error"] for r in runs if r.get("first_error")), None),
        "rps": median_of(runs, "rps"),
        "p50": median_of(runs, "latency_ms.p50"),
        "p99": median_of(runs, "latency_ms.p99"),
        "ttfb_p50": median_of(runs, "ttfb_ms.p50"),
        "ttfb_p99": median_of(runs, "ttfb_ms.p99"),
        "cpu_ms": median_of(runs, "proxy_cpu_ms_per_req"),
    }


def rows(result: dict) -> list[dict]:
    """One row per target and concurrency, with direct's (d) and the floor relay's (f) numbers alongside."""
    targets = result.get("targets") or []
    base: dict = {"direct": {}, "floor": {}}
    for t in targets:
        if t["kind"] in base:
            for c, runs in t["runs"].items():
                base[t["kind"]][(t["client"], t["mode"], c)] = summarize(runs)
    out = []
    for t in targets:
        if t["error"] is not None or not t["runs"]:
            out.append({**t, "c": None, "s": None, "d": None, "f": None})
            continue
        for c, runs in sorted(t["runs"].items(), key=lambda kv: int(kv[0])):
            s = summarize(runs)
            key = (t["client"], t["mode"], c)
            d = base["direct"].get(key) if t["kind"] != "direct" else None
            f = base["floor"].get(key) if t["kind"] == "proxy" else None
            out.append({**t, "c": int(c), "s": s, "d": d, "f": f})
    return out


def _diff(a, b):
    return a - b if a is not None and b is not None else None


def _ratio(a, b):
    return a / b if a is not None and b else None


def _fmt(v, digits: int = 2, signed: bool = False) -> str:
    if v is None:
        return "-"
    return f"{v:+.{digits}f}" if signed else f"{v:,.{digits}f}"


def _x(v) -> str:
    return f"{v:.2f}×" if v is not None else "-"


def _xf(r: dict, figure: str) -> str:
    """The row's figure as a ratio to the floor relay's in the same run."""
    return _x(_ratio(r["s"][figure], r["f"] and r["f"][figure]))


def _cell(text: str | None, limit: int = 140) -> str:
    return (text or "").replace("|", "\\|").replace("\n", " ")[:limit]


# --- targets ------------------------------------------------------------------------


def _proxied(rs: list[dict], mode: str, c: int | None = None, passthrough: bool = False) -> list[dict]:
    return [r for r in rs if r["kind"] == "proxy" and r["passthrough"] == passthrough and r["mode"] == mode
            and r["s"] is not None and (c is None or r["c"] == c)]


def _translated(rs: list[dict], mode: str, c: int | None = None) -> list[dict]:
    return _proxied(rs, mode, c)


def _worst(candidates: list[tuple[str, float | None]], lowest: bool = False):
    known = [(name, v) for name, v in candidates if v is not None]
    if not known:
        return (None, None)
    return (min if lowest else max)(known, key=lambda kv: kv[1])


def _range(values: list[float | None], digits: int) -> str:
    known = sorted(v for v in values if v is not None)
    if len(known) < 2:
        return ""
    return f"; all {known[0]:.{digits}f}-{known[-1]:.{digits}f}"


def _verdict(value, limit, unit: str = "ms", at_least: bool = False) -> str:
    if value is None:
        return "not measured"
    if (value >= limit) if at_least else (value <= limit):
        return "met"
    by = limit - value if at_least else value - limit
    return f"**missed** by {by:,.2f} {unit} ({by / limit:.0%})" if unit != "req/s" else \
        f"**missed** by {by:,.0f} req/s ({by / limit:.0%})"


def _target(name: str, goal: str, value, text: str, limit, unit: str = "ms", at_least: bool = False) -> dict:
    return {"target": name, "goal": goal, "measured": text if value is not None else "-", "value": value,
            "verdict": _verdict(value, limit, unit, at_least)}


def _at_high(rs, passthrough: bool, low) -> str:
    """The same figure at the throughput concurrency, where requests share the event loop's wake-ups."""
    if low == THROUGHPUT_C:
        return ""
    name, v = _worst([(r["pair"], r["s"]["cpu_ms"]) for r in _proxied(rs, "json", THROUGHPUT_C, passthrough)])
    return f"; at c={THROUGHPUT_C} {v:.3f} ms (worst: {name})" if v is not None else ""


def _stream_cpu(rs, events, c, passthrough: bool):
    """(pair, CPU ms per stream, events) of the most expensive stream pair at concurrency c."""
    cands = [(r["pair"], r["s"]["cpu_ms"], events.get(r["provider"])) for r in _proxied(rs, "stream", c, passthrough)]
    known = [x for x in cands if x[1] is not None]
    return (max(known, key=lambda x: x[1]), [x[1] for x in known]) if known else ((None, None, None), [])


def targets(result: dict) -> list[dict]:
    rs = rows(result)
    levels = sorted({r["c"] for r in rs if r["c"] is not None})
    low = levels[0] if levels else None
    events = result.get("stream_events") or {}
    out = []

    cpus = [(r["pair"], r["s"]["cpu_ms"]) for r in _translated(rs, "json", low)]
    name, v = _worst(cpus)
    out.append(_target(f"translated non-streaming: proxy CPU per request (c={low})", f"<= {TRANSLATED_CPU_MS:.2f} ms", v,
                       f"{v:.3f} ms (worst: {name}{_range([x for _, x in cpus], 3)}){_at_high(rs, False, low)}"
                       if v is not None else "", TRANSLATED_CPU_MS))

    added = [(r["pair"], _diff(r["s"]["p50"], r["d"] and r["d"]["p50"])) for r in _translated(rs, "json", 1)]
    name, v = _worst(added)
    out.append(_target("translated non-streaming: added p50 latency, c=1", f"<= {ADDED_P50_MS:g} ms over direct", v,
                       f"+{v:.2f} ms (worst: {name}{_range([x for _, x in added], 2)})" if v is not None else "",
                       ADDED_P50_MS))

    at16 = _translated(rs, "json", THROUGHPUT_C)
    name, v = _worst([(r["pair"], r["s"]["rps"]) for r in at16], lowest=True)
    direct16 = median_of([d for r in at16 for d in ([r["d"]] if r["d"] else [])], "rps")
    text = f"{v:,.0f} req/s (worst: {name})" if v is not None else ""
    if direct16 is not None:
        text += f"; direct {direct16:,.0f}"
    out.append(_target(f"translated non-streaming: throughput at c={THROUGHPUT_C}", f">= {RPS_AT_16:,} req/s", v, text,
                       RPS_AT_16, "req/s", at_least=True))

    micro_worst = _worst([(p["pair"], p.get("stream_us_per_event")) for p in (result.get("micro") or {}).get("pairs", [])
                          if p["client"] != p["provider"]])
    for passthrough, limit, label in ((False, TRANSLATED_STREAM_MS, "translated"), (True, PASSTHROUGH_STREAM_MS, "pass-through")):
        (name, v, n), all_v = _stream_cpu(rs, events, low, passthrough)
        text = ""
        if v is not None:
            text = f"{v:.3f} ms per stream, {v * 1000 / n:.1f} µs per event ({n} events; worst: {name}{_range(all_v, 3)})" \
                if n else f"{v:.3f} ms per stream (worst: {name})"
            if not passthrough and micro_worst[1] is not None:
                text += f"; engine alone {micro_worst[1]:.1f} µs/event (worst: {micro_worst[0]})"
        out.append(_target(f"{label} stream: proxy CPU per stream (c={low})",
                           f"<= {limit:g} ms per 200 events ({limit * 1000 / 200:.1f} µs/event)", v, text, limit))

    ttfb = [(r["pair"], _diff(r["s"]["ttfb_p50"], r["d"] and r["d"]["ttfb_p50"]))
            for r in _proxied(rs, "stream", 1) + _proxied(rs, "stream", 1, passthrough=True)]
    name, v = _worst(ttfb)
    out.append(_target("streams: added time to first event, c=1", f"<= {ADDED_TTFB_MS:g} ms over direct", v,
                       f"+{v:.2f} ms (worst: {name}{_range([x for _, x in ttfb], 2)})" if v is not None else "",
                       ADDED_TTFB_MS))

    cpus = [(r["pair"], r["s"]["cpu_ms"]) for r in _proxied(rs, "json", low, passthrough=True)]
    name, v = _worst(cpus)
    out.append(_target(f"pass-through non-streaming: proxy CPU per request (c={low})", f"<= {PASSTHROUGH_CPU_MS:.2f} ms", v,
                       f"{v:.3f} ms (worst: {name}{_range([x for _, x in cpus], 3)}){_at_high(rs, True, low)}"
                       if v is not None else "", PASSTHROUGH_CPU_MS))

    out.append(_passthrough_target(rs, low))
    out.append(_memory_target(result))

    startup = (result.get("proxy") or {}).get("startup_s")
    warm = (result.get("startup") or {}).get("warm")
    if warm:  # the shipped rules from the compiled-rules cache, as every process after the first
        startup = statistics.median(warm)
    out.append({"target": "startup (spawn to healthy /healthz, config + rules load)", "goal": f"< {STARTUP_S:g} s",
                "measured": f"{startup:.2f} s" if startup is not None else "-",
                "verdict": "not measured" if startup is None else ("met" if startup < STARTUP_S else "**missed**")})
    return out


def _passthrough_target(rs: list[dict], c: int | None) -> dict:
    checks, failed = 0, []
    for mode in ("json", "stream"):
        for client in PROTOCOLS:
            mine = [r for r in rs if r["kind"] == "proxy" and r["client"] == client and r["mode"] == mode
                    and r["s"] is not None and r["c"] == c and r["s"]["cpu_ms"] is not None]
            through = [r for r in mine if r["passthrough"]]
            translated = [r for r in mine if not r["passthrough"]]
            if not through or not translated:
                continue
            checks += 1
            cheapest = min(translated, key=lambda r: r["s"]["cpu_ms"])
            if through[0]["s"]["cpu_ms"] >= cheapest["s"]["cpu_ms"]:
                failed.append(f"{SHORT[client]} {mode}")
    measured = f"{checks - len(failed)}/{checks} client×mode checks" + (f" (not: {', '.join(failed)})" if failed else "")
    return {"target": f"pass-through costs less proxy CPU than translation (c={c})", "goal": "every client and mode",
            "measured": measured if checks else "-", "verdict": "not measured" if not checks else ("met" if not failed else "**missed**")}


def floor_targets(result: dict) -> list[dict]:
    """Step 3: each figure as the worst pair's ratio to the floor relay of its client and mode, at the lowest
    concurrency (time to first event at c=1)."""
    rs = rows(result)
    levels = sorted({r["c"] for r in rs if r["c"] is not None})
    out = []
    for label, mode, passthrough, figure, limit in FLOOR_TARGETS:
        c = 1 if figure == "ttfb_p50" else (levels[0] if levels else None)
        cands = [(r["pair"], _ratio(r["s"][figure], r["f"] and r["f"][figure]), r["s"][figure], r["f"] and r["f"][figure])
                 for r in _proxied(rs, mode, c, passthrough)]
        known = [x for x in cands if x[1] is not None]
        row = {"target": f"{label} (c={c})", "goal": f"<= {limit:g}× the floor's", "limit": limit, "value": None,
               "measured": "-", "verdict": "not measured"}
        if known:
            pair, ratio, mine, floor = max(known, key=lambda x: x[1])
            row.update(value=ratio, verdict="met" if ratio <= limit else f"**missed** ({ratio / limit:.2f}× the goal)",
                       measured=f"{ratio:.2f}× (worst: {pair}, {mine:.3f} against {floor:.3f} ms"
                                f"{_range([x[1] for x in known], 2)})")
        out.append(row)
    return out


def _floor_table(result: dict) -> list[str]:
    rows_ = floor_targets(result)
    if not any(r["value"] is not None for r in rows_):
        return []
    lines = ["## Against the floor (performance step 3 targets)", "",
             "| figure | goal | measured | verdict |", "|---|---|---|---|"]
    lines += [f"| {t['target']} | {t['goal']} | {t['measured']} | {t['verdict']} |" for t in rows_]
    return lines + [""]


def _memory_target(result: dict) -> dict:
    mem = result.get("memory_rounds") or []
    if len(mem) < 2:
        return {"target": "memory flat across rounds", "goal": f"RSS growth < {MEMORY_GROWTH:.0%} after round 1",
                "measured": "needs 2+ rounds", "verdict": "not measured"}
    first, last = mem[0]["rss_kb"], mem[-1]["rss_kb"]
    growth = (last - first) / first if first else 0.0
    return {"target": "memory flat across rounds", "goal": f"RSS growth < {MEMORY_GROWTH:.0%} after round 1",
            "measured": f"{first / 1024:.1f} → {last / 1024:.1f} MiB ({growth:+.1%})",
            "verdict": "met" if growth < MEMORY_GROWTH else "**missed**"}


# --- markdown ------------------------------------------------------------------------------


def run_lines(result: dict, machine_tail: str = "") -> list[str]:
    """The date and machine lines every bench report opens with."""
    m = result.get("machine") or {}
    return [
        f"- date: {result.get('date')}" + (f", commit {result['commit']}" if result.get("commit") else ""),
        f"- machine: {m.get('nproc')} CPUs ({m.get('cpu_model')}), {m.get('memory_gib')} GiB, "
        f"{m.get('implementation', 'Python')} {m.get('python')}{machine_tail}",
    ]


def markdown(result: dict) -> str:
    m = result.get("machine") or {}
    o = result.get("options") or {}
    proxy = result.get("proxy") or {}
    events = result.get("stream_events") or {}
    lines = [
        "# ProxAI benchmark",
        "",
        *run_lines(result, f", Linux {m.get('kernel')}"),
        f"- settings: {o.get('rounds')} interleaved round(s), concurrency {', '.join(map(str, o.get('concurrency') or []))}, "
        f"{o.get('seconds')} s per case, {o.get('deltas')} deltas per stream "
        f"({', '.join(f'{SHORT[p]} {n}' for p, n in events.items())} upstream events"
        f"{_pacing(o)}), "
        f"proxy log level {o.get('proxy_log_level')}" + (f", proxy args `{o['proxy_args']}`" if o.get("proxy_args") else ""),
        f"- placement: {(result.get('placement') or {}).get('description', 'not pinned')}"
        + _calibration(result),
        f"- medians over rounds; "
        f"+ = proxy minus direct, × = proxy / direct, × floor = proxy / the floor relay (bench/floor.py) "
        f"on the proxy's CPU in the same rounds; the floor rows' CPU column is the floor's" + (f"; wall time {result['wall_s']:.0f} s" if "wall_s" in result else ""),
        "",
    ]
    if result.get("targets"):
        lines += ["## Targets", "", "| target | goal | measured | verdict |", "|---|---|---|---|"]
        lines += [f"| {t['target']} | {t['goal']} | {t['measured']} | {t['verdict']} |" for t in targets(result)]
        lines.append("")
        lines += _floor_table(result)
        lines += _json_table(result) + _stream_table(result, events) + _scaling(result) + _published(result) + _ceiling(result)
        lines += _memory(result, proxy)
    if result.get("micro"):
        lines += ["## Engine alone (no network)", "", micro.table(result["micro"]), ""]
    if result.get("profile"):
        lines += [f"Profile of the proxy (pyinstrument): {', '.join(result['profile'])}", ""]
    return "\n".join(lines)


def _calibration(result: dict) -> str:
    cal = result.get("calibration_ms") or []
    if not cal:
        return ""
    return (f"; CPU speed check (a fixed Python loop on the proxy's CPU, lower is faster): "
            f"{' then '.join(f'{c:.1f}' for c in cal)} ms at start and end; compare runs only at similar figures")


def _pacing(o: dict) -> str:
    parts = []
    if (o.get("events_per_write") or 1) != 1:
        parts.append(f"{o['events_per_write']} per write")
    if o.get("gap_ms"):
        parts.append(f"{o['gap_ms']:g} ms apart")
    return "; " + ", ".join(parts) if parts else ""


def _json_table(result: dict) -> list[str]:
    lines = [
        "## Non-streaming (~1 KB request, ~1 KB reply)",
        "",
        "| case | c | req/s | p50 ms | p99 ms | +p50 ms | p50 × | req/s × | proxy CPU ms/req "
        "| CPU × floor | p50 × floor | p99 × floor | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows(result):
        if r["mode"] != "json":
            continue
        if r["s"] is None:
            lines.append(f"| {r['name']} | | | | | | | | | | | | ERROR: {_cell(r['error'])} |")
            continue
        s, d = r["s"], r["d"]
        lines.append(
            f"| {r['name']} | {r['c']} | {_fmt(s['rps'], 0)} | {_fmt(s['p50'])} | {_fmt(s['p99'])} | "
            f"{_fmt(_diff(s['p50'], d and d['p50']), signed=True)} | {_x(_ratio(s['p50'], d and d['p50']))} | "
            f"{_x(_ratio(s['rps'], d and d['rps']))} | {_fmt(s['cpu_ms'], 3)} | "
            f"{_xf(r, 'cpu_ms')} | {_xf(r, 'p50')} | {_xf(r, 'p99')} | {_errors(s)} |"
        )
    return lines + [""]


def _stream_table(result: dict, events: dict) -> list[str]:
    lines = [
        "## Streaming (text deltas, then two interleaved tool calls)",
        "",
        "| case | c | req/s | TTFB p50 ms | +TTFB ms | full p50 ms | full p99 ms | +full p50 ms | full × "
        "| proxy CPU ms/stream | µs/event | CPU × floor | TTFB × floor | full p50 × floor | full p99 × floor | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows(result):
        if r["mode"] != "stream":
            continue
        if r["s"] is None:
            lines.append(f"| {r['name']} | | | | | | | | | | | | | | | ERROR: {_cell(r['error'])} |")
            continue
        s, d = r["s"], r["d"]
        lines.append(
            f"| {r['name']} | {r['c']} | {_fmt(s['rps'], 0)} | {_fmt(s['ttfb_p50'])} | "
            f"{_fmt(_diff(s['ttfb_p50'], d and d['ttfb_p50']), signed=True)} | {_fmt(s['p50'])} | {_fmt(s['p99'])} | "
            f"{_fmt(_diff(s['p50'], d and d['p50']), signed=True)} | {_x(_ratio(s['p50'], d and d['p50']))} | "
            f"{_fmt(s['cpu_ms'], 3)} | {_fmt(_per_event(s['cpu_ms'], events.get(r['provider'])), 1)} | "
            f"{_xf(r, 'cpu_ms')} | {_xf(r, 'ttfb_p50')} | {_xf(r, 'p50')} | {_xf(r, 'p99')} | {_errors(s)} |"
        )
    return lines + [""]


def _per_event(cpu_ms, n):
    return cpu_ms * 1000 / n if cpu_ms is not None and n else None


def _errors(s: dict) -> str:
    if not s["errors"]:
        return "0"
    return f"{s['errors']}/{s['requests'] + s['errors']}: {_cell(s['first_error'], 80)}"


def _scaling(result: dict) -> list[str]:
    sc = result.get("scaling") or {}
    if not sc.get("cases"):
        return []
    w = sc["workers"]
    lines = [
        f"## `--workers` scaling: 1 worker on one CPU, {w} workers on {w}",
        "",
        f"Placement of the {w}-worker proxy: {sc['placement']['description']}.",
        "",
        f"| case | c | 1 worker req/s | {w} workers req/s | × | 1 worker CPU ms/req | {w} workers CPU ms/req | errors |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    capacity = []
    for case in sc["cases"]:
        one, many = summarize(case["runs"]["1"]), summarize(case["runs"][str(w)])
        errors = one["errors"] + many["errors"]
        lines.append(f"| {case['name']} | {case['c']} | {_fmt(one['rps'], 0)} | {_fmt(many['rps'], 0)} | "
                     f"{_x(_ratio(many['rps'], one['rps']))} | {_fmt(one['cpu_ms'], 3)} | {_fmt(many['cpu_ms'], 3)} | "
                     f"{errors or 0}{': ' + _cell(one['first_error'] or many['first_error'], 80) if errors else ''} |")
        if one["cpu_ms"]:
            capacity.append((case["name"], case["c"], 1000 / one["cpu_ms"], _ratio(many["rps"], one["rps"]), case["mode"]))
    capacity = [x for x in capacity if x[4] == "json"] or capacity
    if capacity:
        name, c, per_core, gain, _mode = min(capacity, key=lambda x: x[2])
        shared = bool(set(sc["placement"].get("proxy") or ()) & set(sc["placement"].get("load") or ()))
        lines += ["", f"Workers share nothing (SO_REUSEPORT spreads connections), so with cores to spare for the load "
                  f"throughput grows about linearly with workers until the cores run out: one core serves about "
                  f"{per_core:,.0f} req/s of {name} at c={c} at this CPU per request (1000 / CPU ms per request), "
                  f"N cores about N times that."
                  + (f" Here the second worker shares its CPU with the load driver and the mock upstream, so the "
                     f"measured gain ({_x(gain)}) understates what a second free core gives." if shared else "")]
    return lines + [""]


def _published(result: dict) -> list[str]:
    """The published gateway method's tables (bench/published.py)."""
    pub = result.get("published") or {}
    if not pub.get("latency"):
        return []
    lat = {x["name"]: summarize(x["runs"]) for x in pub["latency"]}
    direct = next((lat[x["name"]] for x in pub["latency"] if x["kind"] == "direct"), None)
    floor = next((lat[x["name"]] for x in pub["latency"] if x["kind"] == "floor"), None)

    def added(s, key):
        return _diff(s[key], direct and direct[key]) if s is not direct else None

    lines = [f"## Published method (mock upstream answering after {pub['upstream_latency_ms']:g} ms)", "",
             f"Added latency at c=1 ({pub['latency_requests']} requests per round, 1 worker; "
             f"{pub['placements'].get('1', '')}): the case minus direct; × floor = its added latency / the floor's.", "",
             "| case | p50 ms | p99 ms | added p50 ms | added p99 ms | added p50 × floor | added p99 × floor | errors |",
             "|---|---:|---:|---:|---:|---:|---:|---|"]
    for x in pub["latency"]:
        s = lat[x["name"]]
        ratio = x["kind"] == "proxy" and floor
        lines.append(f"| {x['name']} | {_fmt(s['p50'])} | {_fmt(s['p99'])} | "
                     f"{_fmt(added(s, 'p50'), signed=True)} | {_fmt(added(s, 'p99'), signed=True)} | "
                     f"{_x(_ratio(added(s, 'p50'), added(floor, 'p50'))) if ratio else '-'} | "
                     f"{_x(_ratio(added(s, 'p99'), added(floor, 'p99'))) if ratio else '-'} | "
                     f"{_errors(s)} |")
    by = {(x["name"], x["workers"]): summarize(x["runs"]) for x in pub["rps"]}
    floors = {w: s for (name, w), s in by.items() if name.startswith("floor ")}
    lines += ["", f"Sustained req/s at c={pub['concurrency']}; 2 workers: "
              f"{pub['placements'].get('2', '')}.", "",
              "| case | 1 worker req/s | 2 workers req/s | 2 / 1 | × floor (1) | × floor (2) | errors |",
              "|---|---:|---:|---:|---:|---:|---|"]
    for name in dict.fromkeys(n for n, _ in by):
        one, two = by.get((name, 1)), by.get((name, 2))
        is_floor = name.startswith("floor ")
        lines.append(f"| {name} | {_fmt(one and one['rps'], 0)} | {_fmt(two and two['rps'], 0)} | "
                     f"{_x(_ratio(two and two['rps'], one and one['rps']))} | "
                     f"{'-' if is_floor else _x(_ratio(one and one['rps'], floors.get(1, {}).get('rps')))} | "
                     f"{'-' if is_floor else _x(_ratio(two and two['rps'], floors.get(2, {}).get('rps')))} | "
                     f"{(one['errors'] if one else 0) + (two['errors'] if two else 0)} |")
    return lines + [""]


def _ceiling(result: dict) -> list[str]:
    ceiling = result.get("ceiling") or []
    if not ceiling:
        return []
    lines = [
        "## Load driver ceiling (driver → mock upstream, `{}` reply)",
        "",
        "| c | req/s | p50 ms | p99 ms | driver CPU ms/req |",
        "|---:|---:|---:|---:|---:|",
    ]
    for c in ceiling:
        runs = c["runs"]
        lines.append(f"| {c['concurrency']} | {_fmt(median_of(runs, 'rps'), 0)} | {_fmt(median_of(runs, 'latency_ms.p50'))} | "
                     f"{_fmt(median_of(runs, 'latency_ms.p99'))} | {_fmt(median_of(runs, 'driver_cpu_ms_per_req'), 3)} |")
    lines += ["", "A case whose req/s nears this ceiling measures the driver, not the proxy.", ""]
    return lines


def _memory(result: dict, proxy: dict) -> list[str]:
    mem = result.get("memory_rounds") or []
    if not proxy:
        return []
    parts = [f"startup {proxy.get('startup_s', 0):.2f} s"]
    if proxy.get("rss_kb_at_start"):
        parts.append(f"RSS at start {proxy['rss_kb_at_start'] / 1024:.1f} MiB")
    if mem:
        parts.append("after each round " + ", ".join(f"{x['rss_kb'] / 1024:.1f}" for x in mem) + " MiB")
    if proxy.get("peak_rss_kb"):
        parts.append(f"peak (VmHWM) {proxy['peak_rss_kb'] / 1024:.1f} MiB")
    lines = ["## Proxy process", "", "; ".join(parts) + ".", ""]
    if result.get("startup"):
        lines += [startup_bench.summary(result["startup"]) + " (off: every process compiles the rules; cold: "
                  "compiles and writes the entry; warm: loads it).", ""]
    return lines
