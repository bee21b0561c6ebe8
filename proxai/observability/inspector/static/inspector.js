// ProxAI inspector: the list of recent requests (live), one request's phases and
// stream timeline, and a translate dry run. Plain DOM, no dependencies; every
// value from a request is inserted as text, never as HTML.
"use strict";

const API = "api/";
const PHASES = [
  ["inbound_request", "Client request", "1"],
  ["provider_request", "Provider request", "2"],
  ["upstream_response", "Upstream response", "3"],
  ["outbound_response", "Client response", "4"],
];
// protocol id -> {title, family}, from the protocols' descriptors (GET api/requests).
let PROTOCOLS = {};
const FILTERS = ["f-client", "f-provider", "f-model", "f-status", "f-outcome"];

const state = { rows: new Map(), selected: null, detail: null, pane: "phases", fresh: new Set() };

// --- small DOM helpers -------------------------------------------------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}
const $ = (id) => document.getElementById(id);
// replaceChildren, skipping absent parts (replaceChildren itself would write "null").
function fill(node, ...children) {
  node.replaceChildren(...children.filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

function fmtTime(epoch) {
  const d = new Date(epoch * 1000);
  const p = (n, w = 2) => String(n).padStart(w, "0");
  return `${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}.${p(d.getMilliseconds(), 3)}`;
}
function fmtMs(v) {
  if (v === null || v === undefined) return "";
  return v >= 1000 ? `${(v / 1000).toFixed(2)} s` : `${Number(v).toFixed(1)} ms`;
}
function proto(p) {
  if (!p) return el("span", { class: "muted", text: "?" });
  const info = PROTOCOLS[p] || {};
  return el("span", { class: `proto ${info.family || ""}`, title: p, text: info.title || p });
}
function compact(v, limit) {
  const text = typeof v === "string" ? v : JSON.stringify(v);
  return limit && text.length > limit ? text.slice(0, limit) + "…" : text;
}

// The one thing an event says, for a glance down the timeline: its text delta,
// tool arguments, stop reason, block or item type. Null when nothing stands out.
function gist(d) {
  if (!d || typeof d !== "object") return null;
  const q = (v) => JSON.stringify(v);
  const choice = Array.isArray(d.choices) ? d.choices[0] : null;
  if (choice) {
    const delta = choice.delta || {};
    const parts = [];
    if (delta.role) parts.push(`role ${delta.role}`);
    if (delta.content) parts.push(q(delta.content));
    if (delta.reasoning_content) parts.push(`reasoning ${q(delta.reasoning_content)}`);
    for (const t of delta.tool_calls || []) parts.push(`tool_call[${t.index}]${t.function?.name ? " " + t.function.name : ""}${t.function?.arguments ? " " + q(t.function.arguments) : ""}`);
    if (choice.finish_reason) parts.push(`finish_reason ${choice.finish_reason}`);
    return parts.join(" · ") || null;
  }
  if (Array.isArray(d.choices) && d.usage) return "usage";
  if (d.error) return `error: ${d.error.message || d.error.type || ""}`;
  const delta = d.delta;
  if (typeof delta === "string") return q(delta);
  if (delta && typeof delta === "object") {
    const text = delta.text ?? delta.thinking ?? delta.partial_json;
    if (text !== undefined) return q(text);
    if (delta.stop_reason) return `stop_reason ${delta.stop_reason}`;
  }
  if (d.content_block?.type) return d.content_block.type + (d.content_block.name ? ` ${d.content_block.name}` : "");
  if (d.item?.type) return d.item.type + (d.item.name ? ` ${d.item.name}` : "");
  if (d.response?.status) return `status ${d.response.status}`;
  return null;
}

// --- what a request row says ---------------------------------------------------------

function statusClass(r) {
  if (r.in_flight) return "in flight";
  if (!r.status) return "unknown";
  return `${String(r.status)[0]}xx`;
}
// The data speaks the log's outcome vocabulary (docs/architecture.md); the page says it shorter.
const OUTCOME_LABEL = {
  complete: "complete", complete_without_done: "complete", open: "open",
  "incomplete:eof": "cut", "incomplete:upstream_reset": "cut",
  "incomplete:idle_timeout": "stalled", "incomplete:tool_call_stall": "stalled",
  "incomplete:malformed": "malformed", "incomplete:internal": "internal error",
  upstream_error_event: "upstream error", client_disconnected: "client gone",
};
function outcomeLabel(outcome) {
  return OUTCOME_LABEL[outcome] || outcome;
}
function result(r) {
  if (r.in_flight) return "open";
  if (r.status === 499) return "client gone";
  if (r.stream && r.outcome) return outcomeLabel(r.outcome);
  if (r.status && r.status >= 400) return "error";
  return r.status ? "ok" : "unknown";
}
function resultBadge(r) {
  const what = result(r);
  const tone = { complete: "ok", ok: "ok", open: "run", "client gone": "warn", stalled: "warn", cut: "bad",
    malformed: "bad", error: "bad", "upstream error": "bad", "internal error": "bad" }[what] || "";
  const label = r.stream && !r.in_flight ? `${what} · stream` : what;
  return el("span", { class: `badge ${tone} outcome`, text: label });
}
function statusBadge(r) {
  if (r.in_flight) return el("span", { class: "badge run status", text: "…" });
  const s = r.status;
  const tone = !s ? "" : s < 300 ? "ok" : s < 500 ? "warn" : "bad";
  return el("span", { class: `badge ${tone} status`, text: s ? String(s) : "?" });
}
function tokens(r) {
  if (r.input_tokens === null || r.input_tokens === undefined) return "";
  return `${r.input_tokens} / ${r.output_tokens ?? 0}`;
}

// --- the list --------------------------------------------------------------------------

function matches(r) {
  const want = {
    client_protocol: $("f-client").value,
    provider: $("f-provider").value,
    model: $("f-model").value,
    status_class: $("f-status").value,
    result: $("f-outcome").value,
  };
  const have = { client_protocol: r.client_protocol || "", provider: r.provider || "", model: r.model || "",
    status_class: statusClass(r), result: result(r) };
  return Object.entries(want).every(([k, v]) => !v || have[k] === v);
}

function sortedRows() {
  return [...state.rows.values()].sort((a, b) => b.time - a.time);
}

function refreshFilterOptions() {
  const rows = sortedRows();
  const fields = {
    "f-client": (r) => r.client_protocol,
    "f-provider": (r) => r.provider,
    "f-model": (r) => r.model,
    "f-status": statusClass,
    "f-outcome": result,
  };
  for (const [id, get] of Object.entries(fields)) {
    const select = $(id);
    const current = select.value;
    const values = [...new Set(rows.map(get).filter((v) => v))].sort();
    if (current && !values.includes(current)) values.push(current);
    const have = [...select.options].slice(1).map((o) => o.value);
    if (have.join("\n") === values.join("\n")) continue;
    fill(select, el("option", { value: "", text: "all" }),
      ...values.map((v) => el("option", { value: v, text: id === "f-client" ? `${(PROTOCOLS[v] || {}).title || v} (${v})` : v })));
    select.value = current;
  }
}

function renderList() {
  refreshFilterOptions();
  const all = sortedRows();
  const shown = all.filter(matches);
  const body = $("rows");
  fill(body, ...shown.map(rowNode));
  const noun = all.length === 1 ? "request" : "requests";
  $("count").textContent = shown.length === all.length ? `${all.length} ${noun}` : `${shown.length} of ${all.length} ${noun}`;
  $("empty").hidden = all.length > 0;
  state.fresh.clear();
}

function rowNode(r) {
  const tr = el("tr", {
    class: `req-row${r.key === state.selected ? " selected" : ""}${state.fresh.has(r.key) ? " fresh" : ""}`,
    "data-key": r.key, "data-request-id": r.request_id,
  },
  el("td", { class: "mono muted", text: fmtTime(r.time) }),
  el("td", { class: "mono rid" }, r.request_id, r.source === "disk" ? el("span", { class: "badge", text: "disk", title: "read from the capture files" }) : null),
  el("td", { class: "pair" }, proto(r.client_protocol), el("span", { class: "arrow", text: "→" }), proto(r.provider_protocol),
    r.provider ? el("span", { class: "muted", text: ` ${r.provider}` }) : null),
  el("td", { class: "mono model", text: r.model || "" }),
  el("td", {}, statusBadge(r)),
  el("td", {}, resultBadge(r)),
  el("td", { class: "num duration", text: fmtMs(r.duration_ms) }),
  el("td", { class: "num ttfb", text: fmtMs(r.ttfb_ms) }),
  el("td", { class: "num tokens", text: tokens(r) }));
  tr.addEventListener("click", () => openRequest(r.key));
  return tr;
}

async function loadList() {
  const res = await fetch(API + "requests", { cache: "no-store" });
  if (!res.ok) return;
  const doc = await res.json();
  state.rows = new Map(doc.requests.map((r) => [r.key, r]));
  PROTOCOLS = doc.protocol_info || {};
  if (!$("t-from").options.length) fillProtocols(doc.protocols);
  renderList();
}

function upsert(r) {
  const isNew = !state.rows.has(r.key);
  state.rows.set(r.key, r);
  if (isNew) state.fresh.add(r.key);
  renderList();
  if (state.selected === r.key && !r.in_flight) openRequest(r.key);
}

// --- live updates: server-sent events, polling if they fail ------------------------------

let pollTimer = null;
function connect() {
  const live = $("live");
  if (!window.EventSource) return startPolling();
  const source = new EventSource(API + "events");
  let dropped = false;
  source.addEventListener("open", () => {
    live.classList.add("on");
    $("live-text").textContent = "live";
    if (dropped) loadList();  // catch up on what happened while disconnected
    dropped = false;
  });
  source.addEventListener("request", (e) => upsert(JSON.parse(e.data)));
  source.addEventListener("error", () => {
    dropped = true;
    live.classList.remove("on");
    $("live-text").textContent = "reconnecting";
  });
}
function startPolling() {
  if (pollTimer) return;
  $("live-text").textContent = "polling";
  pollTimer = setInterval(loadList, 2000);
}

// --- one request -------------------------------------------------------------------------

async function openRequest(key) {
  state.selected = key;
  for (const tr of document.querySelectorAll("tr.req-row")) tr.classList.toggle("selected", tr.dataset.key === key);
  const res = await fetch(API + "requests/" + encodeURIComponent(key), { cache: "no-store" });
  const doc = await res.json();
  if (state.selected !== key) return;
  if (!res.ok) {
    $("detail").hidden = false;
    fill($("detail-head"), el("span", { class: "muted", text: doc.error?.message || "not found" }));
    return;
  }
  state.detail = doc;
  renderDetail(doc);
}

function renderDetail(doc) {
  const s = doc.summary;
  $("detail").hidden = false;
  const kv = (k, v) => (v === null || v === undefined || v === "" ? null : el("span", { class: "kv" }, `${k} `, el("b", { text: String(v) })));
  fill($("detail-head"),
    el("h2", { text: s.request_id }),
    el("span", { class: "pair" }, proto(s.client_protocol), el("span", { class: "arrow", text: "→" }), proto(s.provider_protocol)),
    kv("mode", s.mode), kv("route", s.route), kv("provider", s.provider), kv("model", s.model),
    kv("upstream model", s.upstream_model), kv("status", s.in_flight ? "in flight" : s.status),
    kv("duration", fmtMs(s.duration_ms)), kv("TTFB", fmtMs(s.ttfb_ms)),
    s.input_tokens !== null && s.input_tokens !== undefined ? kv("tokens", tokens(s)) : null,
    kv("upstream id", s.upstream_request_id), s.source === "disk" ? kv("from", "capture files") : null);
  renderPhases(doc);
  renderTimeline(doc);
  renderTrace(doc);
  const tl = $("subtab-timeline");
  tl.hidden = !doc.timeline;
  const nTrace = (doc.traces || []).length + (doc.error ? 1 : 0);
  fill($("subtab-trace"), "Trace", nTrace ? el("span", { class: `badge n ${doc.error ? "bad" : ""}`, text: String(nTrace) }) : null);
  // The pane chosen stays chosen from one request to the next (handy for comparing them).
  if (state.pane === "timeline" && !doc.timeline) state.pane = "phases";
  showPane(state.pane);
  if (s.in_flight) {
    // A stream still running: follow it until it ends.
    const key = s.key;
    setTimeout(() => { if (state.selected === key) openRequest(key); }, 1000);
  }
}

function showPane(name) {
  state.pane = name;
  for (const b of document.querySelectorAll(".subtab")) b.classList.toggle("active", b.dataset.pane === name);
  for (const p of ["phases", "timeline", "trace"]) $("pane-" + p).hidden = p !== name;
}

// --- phases, with the request diff -----------------------------------------------------

function renderPhases(doc) {
  const client = doc.phases.inbound_request?.json;
  const provider = doc.phases.provider_request?.json;
  const marks = { inbound_request: new Map(), provider_request: new Map() };
  if (client !== undefined && provider !== undefined) {
    diff(client, provider, "$", marks.inbound_request, marks.provider_request);
  }
  const cols = PHASES.map(([name, title, step]) => {
    const p = doc.phases[name];
    const head = el("h3", {}, el("span", {}, el("span", { class: "step", text: `${step}. ` }), title),
      p ? el("span", { text: p.stream ? `${(p.events || []).length} events` : sizeText(p.size) }) : null);
    if (!p) return el("div", { class: "phase", "data-phase": name }, head, el("div", { class: "missing", text: "not recorded" }));
    const headers = el("details", { class: "headers" }, el("summary", { text: `${p.headers.length} headers` }),
      el("table", { class: "hdrs" }, ...p.headers.map(([k, v]) => el("tr", {}, el("td", { class: "hn", text: k }),
        el("td", { class: v === "[redacted]" ? "redacted" : "", text: v })))));
    let body;
    if (p.stream) {
      body = el("ol", { class: "events" }, ...(p.events || []).map((e) => {
        const g = gist(e.data);
        return el("li", {}, el("span", { class: "ev-n", text: `#${e.n}` }), e.event ? el("span", { class: "ev-name", text: e.event }) : null,
          g ? el("span", { class: "gist", text: g }) : null, el("span", { class: "raw", text: compact(e.data, 400) }));
      }));
    } else if ("json" in p) {
      body = renderJson(p.json, marks[name] || new Map());
    } else {
      body = el("pre", { class: "code", text: p.text || "(empty body)" });
    }
    return el("div", { class: "phase", "data-phase": name }, head, el("div", { class: "start", text: p.start_line }), headers,
      body, p.truncated ? el("p", { class: "note", text: "truncated: only the first part is kept in memory" }) : null);
  });
  fill($("phases"), ...cols);
}

function sizeText(n) {
  return n >= 1024 ? `${(n / 1024).toFixed(1)} KiB` : `${n} B`;
}

// Marks paths that differ: `left` gets changed/removed, `right` changed/added.
// `path` is the place in a, `rpath` the place in b (they differ once array elements shift).
function diff(a, b, path, left, right, rpath = path) {
  const kind = (v) => (Array.isArray(v) ? "array" : v === null ? "null" : typeof v);
  if (kind(a) !== kind(b)) { left.set(path, "changed"); right.set(rpath, "changed"); return; }
  if (kind(a) === "object") {
    for (const k of Object.keys(a)) {
      if (!(k in b)) left.set(`${path}.${k}`, "removed");
      else diff(a[k], b[k], `${path}.${k}`, left, right, `${rpath}.${k}`);
    }
    for (const k of Object.keys(b)) if (!(k in a)) right.set(`${rpath}.${k}`, "added");
  } else if (kind(a) === "array") {
    // Line elements up by kind (same role or type), not by position: a translation that
    // moves one message elsewhere (system to a top-level field) shifts all the others.
    for (const [i, j] of align(a, b)) {
      if (j === null) left.set(`${path}[${i}]`, "removed");
      else if (i === null) right.set(`${rpath}[${j}]`, "added");
      else diff(a[i], b[j], `${path}[${i}]`, left, right, `${rpath}[${j}]`);
    }
  } else if (a !== b) {
    left.set(path, "changed"); right.set(rpath, "changed");
  }
}

// Pairs [i, j] of a longest common subsequence of similar elements; [i, null] and
// [null, j] for those left over. Long arrays are paired by position.
function align(a, b) {
  const similar = (x, y) => {
    if (x === null || y === null || typeof x !== "object" || typeof y !== "object") return x === y;
    if (Array.isArray(x) || Array.isArray(y)) return Array.isArray(x) && Array.isArray(y);
    if ("role" in x || "role" in y) return x.role === y.role;
    if ("type" in x || "type" in y) return x.type === y.type;
    return true;
  };
  const n = a.length, m = b.length;
  if (n * m > 40000) {
    return Array.from({ length: Math.max(n, m) }, (_, k) => [k < n ? k : null, k < m ? k : null]);
  }
  const L = Array.from({ length: n + 1 }, () => new Array(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      L[i][j] = similar(a[i], b[j]) ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
    }
  }
  const pairs = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (similar(a[i], b[j]) && L[i][j] === L[i + 1][j + 1] + 1) pairs.push([i++, j++]);
    else if (L[i + 1][j] >= L[i][j + 1]) pairs.push([i++, null]);
    else pairs.push([null, j++]);
  }
  while (i < n) pairs.push([i++, null]);
  while (j < m) pairs.push([null, j++]);
  return pairs;
}

function renderJson(value, marks) {
  const out = el("div", { class: "json" });
  const line = (depth, cls, path, ...parts) => {
    const node = el("div", { class: `jl${cls ? " " + cls : ""}`, "data-path": path }, "  ".repeat(depth), ...parts);
    out.append(node);
  };
  const scalar = (v) => {
    if (typeof v === "string") return el("span", { class: "j-str", text: JSON.stringify(v) });
    if (typeof v === "number") return el("span", { class: "j-num", text: String(v) });
    return el("span", { class: "j-lit", text: String(v) });
  };
  const punct = (t) => el("span", { class: "j-punct", text: t });
  const walk = (v, path, depth, key, last, inherited) => {
    const cls = marks.get(path) || inherited;
    const label = key === null ? [] : [el("span", { class: "j-key", text: JSON.stringify(key) }), punct(": ")];
    const comma = last ? "" : ",";
    if (v !== null && typeof v === "object") {
      const isArr = Array.isArray(v);
      const entries = isArr ? v.map((x, i) => [i, x]) : Object.entries(v);
      const [open, close] = isArr ? ["[", "]"] : ["{", "}"];
      if (!entries.length) { line(depth, cls, path, ...label, punct(open + close + comma)); return; }
      line(depth, cls, path, ...label, punct(open));
      entries.forEach(([k, x], i) => walk(x, isArr ? `${path}[${k}]` : `${path}.${k}`, depth + 1, isArr ? null : k, i === entries.length - 1, cls));
      line(depth, cls, path, punct(close + comma));
    } else {
      line(depth, cls, path, ...label, scalar(v), punct(comma));
    }
  };
  walk(value, "$", 0, null, true, "");
  return out;
}

// --- the stream timeline ----------------------------------------------------------------

const END_TONE = { complete: "ok", open: "warn", "client gone": "warn", stalled: "warn" };
const END_TEXT = {
  complete: "the stream completed with its terminal event",
  cut: "the upstream stream ended (or its connection broke) before its terminal event",
  stalled: "the provider went silent past its timeout",
  malformed: "an upstream event could not be read",
  "client gone": "the client disconnected",
  "upstream error": "the provider sent its own error event",
  "internal error": "an internal error in the proxy ended the stream",
  open: "still streaming",
};

const TAIL_TEXT = {
  complete: "end of the upstream stream",
  cut: "end of the upstream stream (or a broken connection)",
  stalled: "silence: the proxy's timeout fired",
  "client gone": "the client went away",
};

function eventNode(e, relayed) {
  const g = gist(e.data);
  const summary = el("summary", {}, e.event ? el("span", { class: "ev-name", text: e.event }) : null,
    g ? el("span", { class: "gist", text: g }) : null, el("span", { class: "raw", text: compact(e.data, 240) }));
  const pre = el("pre", { text: typeof e.data === "string" ? e.data : JSON.stringify(e.data, null, 2) });
  return el("div", { class: "ev", "data-n": e.n }, relayed ? el("span", { class: "relayed", text: "relayed as is:" }) : null,
    el("details", {}, summary, pre));
}

function renderTimeline(doc) {
  const pane = $("pane-timeline");
  const t = doc.timeline;
  if (!t) { fill(pane); return; }
  const end = t.end || {};
  const reason = end.outcome ? outcomeLabel(end.outcome)
    : end.message ? "error" : end.replayed ? "unknown (from capture)" : "unknown";
  const banner = el("div", { class: `end ${END_TONE[reason] || "bad"}`, id: "stream-end", "data-reason": reason,
    "data-outcome": end.outcome || "", title: end.outcome ? `outcome ${end.outcome}` : "" },
    el("span", { class: "what", text: `Stream ended: ${reason}` }),
    el("span", { text: END_TEXT[reason] || "" }),
    el("span", { class: "muted", text: `after upstream event #${end.after_event}${end.at_ms ? ` · ${fmtMs(end.at_ms)}` : ""}` }),
    end.message ? el("span", { class: "mono", text: end.message }) : null);
  const table = el("table", { class: "timeline", id: "timeline" },
    el("colgroup", {}, el("col", { class: "c-n" }), el("col", { class: "c-t" }), el("col", {}), el("col", { class: "c-arrow" }), el("col", {})),
    el("thead", {}, el("tr", {}, el("th", { text: "#" }), el("th", { text: "time" }), el("th", { text: "upstream event" }), el("th", {}),
      el("th", { text: "client events it produced" }))));
  const body = el("tbody");
  for (const row of t.rows) {
    const client = row.client.length
      ? row.client.map((c) => eventNode(c, c.relayed))
      : [t.linked ? "nothing sent to the client" : "—"];
    body.append(el("tr", { class: `tl-row${row.client.length ? "" : " none"}`, "data-n": row.n },
      el("td", { class: "muted", text: `#${row.n}` }),
      el("td", { class: "muted", text: row.t_ms === null || row.t_ms === undefined ? "" : `+${fmtMs(row.t_ms)}` }),
      el("td", { class: "upstream" }, eventNode(row)),
      el("td", { class: "arrow", text: "→" }),
      el("td", { class: "client" }, ...client)));
  }
  if (t.tail.length) {
    body.append(el("tr", { class: "tl-row tail", "data-n": "end" },
      el("td", { class: "muted", text: "end" }), el("td", { class: "muted", text: t.tail[0].t_ms ? `+${fmtMs(t.tail[0].t_ms)}` : "" }),
      el("td", { class: "upstream muted", text: TAIL_TEXT[reason] || "no upstream event: the proxy ended the stream" }),
      el("td", { class: "arrow", text: "→" }),
      el("td", { class: "client" }, ...t.tail.map((c) => eventNode(c)))));
  }
  table.append(body);
  const notes = [];
  if (!t.linked) notes.push(el("p", { class: "note", text: "Replayed from capture files: the rules could not line the client events up with the upstream events, so they are listed at the end." }));
  if (t.truncated) notes.push(el("p", { class: "note", text: "The timeline was truncated: only the first events are kept." }));
  fill(pane, banner, table, ...notes);
}

// --- trace and errors ---------------------------------------------------------------------

function errorBox(err) {
  if (!err) return null;
  const what = [err.translation ? `translation error (${err.translation})` : null, err.kind].filter(Boolean).join(" · ");
  return el("div", { class: "error-box", id: "error-box" },
    el("b", { text: what || "error" }), err.message ? el("div", { text: err.message }) : null,
    err.param ? el("div", { class: "mono", text: `at ${err.param}` }) : null,
    err.rule ? el("span", { class: "rule", text: `rule ${err.rule}` }) : null);
}

function renderTrace(doc) {
  const traces = doc.traces || [];
  fill($("pane-trace"),
    errorBox(doc.error),
    el("p", { class: "section-title", text: "Engine notes (dropped advisory fields, lossy decisions)" }),
    traces.length ? el("ul", { class: "traces", id: "traces" }, ...traces.map((t) => el("li", { text: t })))
      : el("p", { class: "muted", id: "traces", text: doc.summary.mode === "pass-through" ? "Pass-through: nothing was translated." : "No notes for this request." }));
}

// --- translate tab ------------------------------------------------------------------------

const EXAMPLES = {
  request: { model: "claude-sonnet-4-5", stream: true, metadata: { user_id: "u-1" },
    messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Say hello" }] },
};

function fillProtocols(protocols) {
  const choose = (select, value) => {
    fill(select, ...protocols.map((p) => el("option", { value: p, text: p })));
    select.value = value;
  };
  choose($("t-from"), "openai_chat_completions");
  choose($("t-to"), "anthropic_messages");
  if (!$("t-body").value) $("t-body").value = JSON.stringify(EXAMPLES.request, null, 2);
  hint();
}

function hint() {
  const kind = $("t-kind").value;
  $("t-hint").textContent = kind === "request"
    ? "From: the client's protocol; To: the provider's."
    : "From: the provider's protocol; To: the client's.";
  $("t-client-wrap").hidden = kind === "request";
}

async function runTranslate(ev) {
  ev.preventDefault();
  const payload = { kind: $("t-kind").value, from: $("t-from").value, to: $("t-to").value, body: $("t-body").value,
    client_request: $("t-client").value };
  const res = await fetch(API + "translate", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(payload) });
  const doc = await res.json();
  const err = $("t-error");
  if (doc.ok) {
    err.hidden = true;
    $("t-output").textContent = doc.output;
  } else {
    err.hidden = false;
    fill(err, el("b", { text: "The rules rejected this input" }), el("div", { text: doc.error?.message || "error" }),
      doc.error?.param ? el("div", { class: "mono", text: `at ${doc.error.param}` }) : null,
      doc.error?.rule ? el("span", { class: "rule", text: `rule ${doc.error.rule}` }) : null);
    $("t-output").textContent = "";
  }
  const traces = doc.traces || [];
  fill($("t-traces"), ...(traces.length ? traces.map((t) => el("li", { text: t })) : [el("li", { class: "muted", text: "no notes" })]));
}

// --- wiring -----------------------------------------------------------------------------

function showView(name) {
  for (const b of document.querySelectorAll(".tab")) b.classList.toggle("active", b.dataset.view === name);
  $("view-requests").hidden = name !== "requests";
  $("view-translate").hidden = name !== "translate";
}

document.addEventListener("DOMContentLoaded", () => {
  for (const b of document.querySelectorAll(".tab")) b.addEventListener("click", () => showView(b.dataset.view));
  for (const b of document.querySelectorAll(".subtab")) b.addEventListener("click", () => showPane(b.dataset.pane));
  for (const id of FILTERS) $(id).addEventListener("change", renderList);
  $("refresh").addEventListener("click", loadList);
  $("t-kind").addEventListener("change", hint);
  $("translate-form").addEventListener("submit", runTranslate);
  loadList().then(connect, startPolling);
});
