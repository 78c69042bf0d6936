// Tenure console: draws the snapshots the server pushes over one
// server-sent events stream. Rows are keyed and updated in place, so a
// refresh never redraws the page. Every value from the store goes in with
// textContent or an attribute, never as HTML.
"use strict";

const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";
const state = { snap: null, token: "" };

// The actions token arrives in the address's fragment (never sent to the
// server in a URL), is kept for this tab only, and leaves the address bar.
(function takeToken() {
  const m = /(?:^|[#&])token=([^&]+)/.exec(location.hash);
  if (m) {
    sessionStorage.setItem("tenure-token", decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  state.token = sessionStorage.getItem("tenure-token") || "";
})();

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") e.textContent = v;
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const k of kids) if (k) e.append(k);
  return e;
}

function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}

function dur(ms) {
  const a = Math.abs(ms);
  if (a < 10000) return (ms / 1000).toFixed(1) + "s";
  if (a < 120000) return Math.round(ms / 1000) + "s";
  if (a < 7200000) return Math.round(ms / 60000) + "m";
  return Math.round(ms / 3600000) + "h";
}

function clock(ms) {
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

// ---- leases ---------------------------------------------------------

const rows = new Map(); // key → {tr, cells}

function leaseRow(key) {
  const cells = {
    key: el("td", { class: "key", "data-role": "key", title: key, text: key }),
    owner: el("td", { class: "owner", "data-role": "owner" }),
    epoch: el("td", { "data-role": "epoch" }),
    state: el("td", { "data-role": "state" }),
    running: el("td", { "data-role": "running" }),
    time: el("td", { "data-role": "time" }),
    act: el("td", { class: "act", "data-role": "actions" }),
  };
  cells.bar = el("div", { class: "bar" });
  cells.ttl = el("span", { class: "ttl" });
  cells.grace = el("span", { class: "grace" });
  cells.bar.append(cells.ttl, cells.grace);
  cells.left = el("span", { class: "t" });
  cells.time.append(cells.bar, cells.left);
  const tr = el("tr", { "data-role": "lease", "data-key": key });
  tr.append(cells.key, cells.owner, cells.epoch, cells.state, cells.running, cells.time, cells.act);
  return { tr, cells, tags: "", acts: "" };
}

// The bar spans TTL + grace: green is the term's time left, amber the
// grace still to run after expiry, before a peer may take the key.
function drawBar(c, l) {
  const span = Math.max(l.ttl_ms + l.grace_ms, 1);
  let ttl = 0, graceLeft = 0;
  if (l.state === "held") {
    ttl = Math.max(l.time_left_ms, 0);
    graceLeft = l.grace_ms;
  } else if (l.state === "expired" || l.state === "revoked") {
    graceLeft = Math.max(l.grace_ms + l.time_left_ms, 0);
  }
  c.ttl.style.left = "0";
  c.ttl.style.width = (100 * ttl / span) + "%";
  c.grace.style.left = (100 * ttl / span) + "%";
  c.grace.style.width = (100 * graceLeft / span) + "%";
  let text = "–";
  if (l.state === "held") text = dur(l.time_left_ms) + " of " + dur(l.ttl_ms);
  else if (l.state !== "released") text = graceLeft > 0 ? "grace " + dur(graceLeft) : "free";
  setText(c.left, text);
}

function drawTags(r, l) {
  const tags = [l.paused && "paused", l.cooling && "cooling", l.moving && "moving"].filter(Boolean);
  const sig = tags.join(",") + "|" + l.moving;
  if (r.tags === sig) return;
  r.tags = sig;
  r.cells.state.querySelectorAll(".tag").forEach((t) => t.remove());
  for (const t of tags) {
    const title = t === "moving" ? "moving to " + (l.moving === "*" ? "any other replica" : l.moving) : t;
    r.cells.state.append(el("span", { class: "tag " + t, "data-role": "tag-" + t, title, text: t }));
  }
}

function drawActions(r, l, on) {
  const pool = l.pool !== undefined && l.pool !== "";
  const sig = on ? [l.state, l.paused, pool].join() : "";
  if (r.acts === sig) return;
  r.acts = sig;
  r.cells.act.replaceChildren();
  if (!on) return;
  const b = (op, label) => {
    const btn = el("button", { type: "button", "data-op": op, text: label });
    btn.addEventListener("click", () => act(op, l.key));
    r.cells.act.append(btn);
  };
  if (!pool) {
    if (l.state === "held") b("move", "Move");
    b(l.paused ? "resume" : "pause", l.paused ? "Resume" : "Pause");
  }
  if (l.state === "held") b("release", "Release");
}

function visible(l) {
  const prefix = $("filter-prefix").value;
  const pool = $("filter-pool").value;
  if (prefix && !l.key.startsWith(prefix)) return false;
  if (pool === "-") return !l.pool;
  if (pool) return l.pool === pool;
  return true;
}

function drawLeases(s) {
  const tbody = $("lease-rows");
  const shown = s.leases.filter(visible);
  const keep = new Set(shown.map((l) => l.key));
  for (const [k, r] of rows) if (!keep.has(k)) { r.tr.remove(); rows.delete(k); }
  let prev = null;
  for (const l of shown) {
    let r = rows.get(l.key);
    if (!r) { r = leaseRow(l.key); rows.set(l.key, r); }
    const c = r.cells;
    setText(c.owner, l.owner || "–");
    c.owner.title = l.owner;
    setText(c.epoch, String(l.epoch));
    if (c.state.firstChild === null || c.state.firstChild.nodeType !== Node.TEXT_NODE) c.state.prepend(document.createTextNode(""));
    setText(c.state.firstChild, l.state);
    c.state.className = "state-" + l.state;
    drawTags(r, l);
    setText(c.running, l.running ? "yes" : "no");
    drawBar(c, l);
    drawActions(r, l, s.actions);
    // Keep the listing's order, moving a row only when it is out of place.
    const want = prev ? prev.nextSibling : tbody.firstChild;
    if (want !== r.tr) tbody.insertBefore(r.tr, want);
    prev = r.tr;
  }
  $("no-leases").hidden = shown.length > 0;
  $("actions-head").hidden = !s.actions;
  const held = s.leases.filter((l) => l.state === "held").length;
  setText($("counts"), shown.length + " of " + s.leases.length + " keys shown, " + held + " held");
}

function drawPoolFilter(s) {
  const sel = $("filter-pool");
  const names = [...new Set(s.leases.map((l) => l.pool).filter(Boolean))].sort();
  const have = [...sel.options].slice(2).map((o) => o.value);
  if (have.join("\n") === names.join("\n")) return;
  const cur = sel.value;
  while (sel.options.length > 2) sel.remove(2);
  for (const n of names) sel.add(el("option", { value: n, text: n }));
  sel.value = names.includes(cur) || cur === "-" ? cur : "";
}

// ---- pools ----------------------------------------------------------

// drawn remembers what each part was last drawn from, so a part whose
// content did not change is left alone (a selection or a tooltip in it
// survives the second's refresh).
const drawn = { pools: "", handoffs: "" };

function drawPools(s) {
  const sig = JSON.stringify(s.pools);
  if (sig === drawn.pools) return;
  drawn.pools = sig;
  const list = $("pool-list");
  list.replaceChildren();
  for (const p of s.pools) {
    const box = el("div", { class: "pool", "data-role": "pool", "data-pool": p.name });
    box.append(el("h3", { text: p.name + "  ·  " + p.keys + " keys" }));
    const scale = Math.max(1, ...p.workers.map((w) => Math.max(w.held, w.cap)));
    for (const w of p.workers) {
      const gone = w.state !== "active" && w.state !== "draining";
      const row = el("div", { class: "worker " + w.state + (gone ? " gone" : ""), "data-role": "worker", "data-owner": w.owner });
      const bar = el("div", { class: "bar" });
      const held = el("span", { class: "held" });
      held.style.left = "0";
      held.style.width = (100 * w.held / scale) + "%";
      bar.append(held);
      if (!gone) {
        const share = el("span", { class: "share", title: "fair share " + w.share.toFixed(1) });
        share.style.left = (100 * w.share / scale) + "%";
        const cap = el("span", { class: "cap", title: "cap " + w.cap });
        cap.style.left = (100 * w.cap / scale) + "%";
        bar.append(share, cap);
      }
      const n = gone ? w.state : w.held + " held · share " + w.share.toFixed(1) + " · cap " + w.cap + " · weight " + w.weight + (w.max_keys ? " · max " + w.max_keys : "");
      row.append(el("span", { class: "who", title: w.owner, text: w.owner || "–" }), bar, el("span", { class: "n", "data-role": "held", text: n }));
      box.append(row);
    }
    list.append(box);
  }
  $("no-pools").hidden = s.pools.length > 0;
}

// ---- handoffs -------------------------------------------------------

function ownerColor(owner) {
  let h = 0;
  for (const ch of owner) h = (h * 31 + ch.codePointAt(0)) >>> 0;
  return "hsl(" + (h % 360) + " 55% 52%)";
}

// The timeline draws the last five minutes of the most recently active
// keys, a row each: one bar per term, coloured by holder, its end marked
// and titled with the cause.
function drawTimeline(s) {
  const svg = $("timeline");
  const now = s.at, span = 5 * 60 * 1000, from = now - span;
  const byKey = new Map();
  for (const t of s.terms) {
    if ((t.end || now) < from || !visible({ key: t.key, pool: poolOf(s, t.key) })) continue;
    if (!byKey.has(t.key)) byKey.set(t.key, []);
    byKey.get(t.key).push(t);
  }
  const keys = [...byKey.keys()].sort((a, b) => {
    const la = Math.max(...byKey.get(a).map((t) => t.start)), lb = Math.max(...byKey.get(b).map((t) => t.start));
    return lb - la || (a < b ? -1 : 1);
  }).slice(0, 20).sort();
  const W = 1000, label = 180, rowH = 18, H = keys.length * rowH + 20;
  svg.setAttribute("viewBox", "0 0 " + W + " " + H);
  svg.replaceChildren();
  const x = (ms) => label + (W - label - 10) * (Math.max(ms, from) - from) / span;
  const add = (parent, tag, attrs, text) => {
    const e = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text !== undefined) e.textContent = text;
    parent.append(e);
    return e;
  };
  keys.forEach((k, i) => {
    const y = i * rowH;
    const g = add(svg, "g", { "data-role": "timeline-row", "data-key": k });
    add(g, "text", { x: 0, y: y + 13 }, k.length > 24 ? k.slice(0, 23) + "…" : k);
    for (const t of byKey.get(k)) {
      const x0 = x(t.start), x1 = x(t.end || now);
      const r = add(g, "rect", { x: x0, y: y + 3, width: Math.max(x1 - x0, 2), height: rowH - 6, fill: ownerColor(t.owner) });
      const title = document.createElementNS(SVG, "title");
      title.textContent = k + ": " + (t.owner || "nobody") + ", epoch " + t.epoch + (t.end ? ", ended: " + t.cause : ", holding");
      r.append(title);
    }
  });
  for (let m = 0; m <= 5; m++) {
    const xx = x(from + m * 60000);
    add(svg, "line", { x1: xx, x2: xx, y1: 0, y2: H - 16, class: "axis" });
    add(svg, "text", { x: xx - 12, y: H - 3 }, m === 5 ? "now" : "-" + (5 - m) + "m");
  }
}

// poolOf is the pool of a listed key, from a map made once per snapshot.
function poolOf(s, key) {
  if (!s.poolOf) s.poolOf = new Map(s.leases.map((l) => [l.key, l.pool || ""]));
  return s.poolOf.get(key) || "";
}

function drawHandoffs(s) {
  const tbody = $("handoff-rows");
  const list = s.handoffs.filter((h) => visible({ key: h.key, pool: poolOf(s, h.key) })).slice(-50).reverse();
  const sig = JSON.stringify(list);
  if (sig === drawn.handoffs) return;
  drawn.handoffs = sig;
  tbody.replaceChildren(...list.map((h) => {
    const tr = el("tr", { "data-role": "handoff" });
    tr.append(el("td", { text: clock(h.at) }), el("td", { class: "key", text: h.key }),
      el("td", { class: "owner", text: h.from || "–" }), el("td", { class: "owner", text: h.to }),
      el("td", { text: String(h.epoch) }), el("td", { "data-role": "cause", text: h.cause }));
    return tr;
  }));
  $("no-handoffs").hidden = list.length > 0;
}

// ---- actions --------------------------------------------------------

function toast(msg) {
  const t = $("toast");
  t.textContent = msg;
  t.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { t.hidden = true; }, 5000);
}

async function act(op, key) {
  let to = "";
  if (op === "move") {
    const answer = prompt("Move " + key + " to which replica? (empty: any other)", "");
    if (answer === null) return;
    to = answer.trim();
  }
  if (op === "release" && !confirm("Revoke " + key + "? Its command stops at the holder's next renewal.")) return;
  if (!state.token) {
    state.token = (prompt("Actions token (printed by the console at start):", "") || "").trim();
    if (state.token) sessionStorage.setItem("tenure-token", state.token);
  }
  try {
    const res = await fetch("/console/api/action", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Tenure-Token": state.token },
      body: JSON.stringify({ op, key, to }),
    });
    let body = {};
    if ((res.headers.get("Content-Type") || "").startsWith("application/json")) body = await res.json();
    else body.error = res.status + " " + (await res.text()).trim();
    if (res.status === 401) { sessionStorage.removeItem("tenure-token"); state.token = ""; }
    toast(body.message || body.error || res.statusText);
  } catch (e) {
    toast("the action did not reach the console: " + e);
  }
}

// ---- the stream -----------------------------------------------------

function draw() {
  const s = state.snap;
  if (!s) return;
  setText($("store"), s.store);
  setText($("version"), s.version + (s.owner ? " · served by " + s.owner : ""));
  const err = $("error");
  err.hidden = !s.error;
  const before = s.at ? " (showing the read of " + clock(s.at) + ")" : "";
  setText(err, s.error ? "Reading the store failed at " + clock(s.error_at) + before + ": " + s.error : "");
  drawPoolFilter(s);
  drawLeases(s);
  drawPools(s);
  drawTimeline(s);
  drawHandoffs(s);
}

function connect() {
  const live = $("live");
  const es = new EventSource("/console/api/stream");
  es.addEventListener("snapshot", (ev) => {
    state.snap = JSON.parse(ev.data);
    live.className = state.snap.error ? "stale" : "ok";
    setText(live, state.snap.error ? "store unreachable" : "live · read " + clock(state.snap.at));
    draw();
  });
  es.onerror = () => {
    live.className = "stale";
    setText(live, "reconnecting…");
  };
}

$("filter-prefix").addEventListener("input", draw);
$("filter-pool").addEventListener("change", draw);
connect();
