// attnd dashboard (docs/dashboard.md). Plain browser JavaScript, no libraries, no build.
//
// State: every run seen, by id. New runs come from polling GET /v1/runs?after=<cursor>
// (each run is seen there exactly once, when it is first stored); runs not yet final
// (queued, running) are refreshed with GET /v1/runs/<id> until they are.
"use strict";

const POLL_MS = 1000;
const KEEP = 500;               // runs kept in the table
const FINAL = new Set(["done", "failed", "cancelled"]);

const runs = new Map();          // id -> record
let cursor = 0;                  // next_after of the last page
let shapeFollowsLatest = true;   // the shape selector follows the newest run until the user picks one
let selectedRun = null;
let pollError = null;            // why the last poll failed (null: it worked, or none yet)
let polledOnce = false;          // the first poll has answered: an empty table means no runs

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("data-")) e.setAttribute(k, v); else e[k] = v;
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k == null ? "" : String(k)));
  return e;
}

function svgEl(tag, attrs, text) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text != null) e.textContent = text;
  return e;
}

// With token_file set on the server (and public_reads for the page itself), requests carry
// the token typed in the form, kept for this tab only.
function authHeaders(extra) {
  const token = sessionStorage.getItem("attnd-token") || "";
  return Object.assign({}, extra || {}, token ? { Authorization: `Bearer ${token}` } : {});
}

async function getJSON(path, opts) {
  opts = Object.assign({}, opts || {});
  opts.headers = authHeaders(opts.headers);
  const r = await fetch(path, opts);
  let body = null;
  try { body = await r.json(); } catch (e) { /* not JSON */ }
  return { status: r.status, body, headers: r.headers };
}

// ------------------------------------------------------------------ shapes and fields --

function shapeOf(rec) {
  const p = rec.params || {};
  const kv = p.kv_heads != null && p.kv_heads !== p.heads ? ` Hkv${p.kv_heads}` : "";
  const dv = p.head_dim_v != null && p.head_dim_v !== p.head_dim ? ` Dv${p.head_dim_v}` : "";
  const win = p.window != null ? ` W${p.window}` : "";
  return `B${p.batch} H${p.heads}${kv} Sq${p.seq_q} Skv${p.seq_kv} D${p.head_dim}${dv}${win} ${p.dtype} ${p.mask}`;
}
const median = (rec) => (rec.timing && typeof rec.timing.median_us === "number") ? rec.timing.median_us : null;
const kernelsPerForward = (rec) => (rec.kernels && typeof rec.kernels.per_forward === "number") ? rec.kernels.per_forward : null;
// Order of runs, newest first: created (ISO-8601 UTC text sorts as time), then id.
const newestFirst = (a, b) => (b.created || "").localeCompare(a.created || "") || b.id - a.id;
const deviceOf = (rec) => (rec.device && rec.device.id) || (rec.params && rec.params.device) || "";
const fmt = (x, d = 1) => x == null ? "–" : Number(x).toFixed(d);

// ------------------------------------------------------------------------- polling --

async function pollHistory() {
  for (let page = 0; page < 200; page++) {       // catch up on a long history, page by page
    const { status, body } = await getJSON(`/v1/runs?after=${cursor}&limit=1000`);
    if (status !== 200 || !body) throw new Error(`GET /v1/runs answered ${status}`);
    for (const rec of body.runs) runs.set(rec.id, rec);
    cursor = body.next_after;
    if (body.runs.length < 1000) break;
  }
  // Forget the oldest beyond KEEP.
  if (runs.size > KEEP) {
    const ids = [...runs.keys()].sort((a, b) => a - b);
    for (const id of ids.slice(0, ids.length - KEEP)) runs.delete(id);
  }
  // Follow the runs that are not final yet.
  const open = [...runs.values()].filter((r) => !FINAL.has(r.status));
  await Promise.all(open.map(async (r) => {
    const { status, body } = await getJSON(`/v1/runs/${r.id}`);
    if (status === 200 && body) runs.set(r.id, body);
  }));
}

async function tick() {
  try {
    await pollHistory();
    pollError = null;
    polledOnce = true;
    if ($("#notice").dataset.kind === "error") loadDevices();   // back: say again what it serves
    $("#conn").textContent = `live · ${runs.size} runs · after=${cursor}`;
    $("#conn").className = "muted";
  } catch (e) {
    pollError = e.message === "Failed to fetch" ? "the server does not answer" : e.message;
    $("#conn").textContent = `disconnected: ${pollError}`;
    $("#conn").className = "error";
  }
  render();
  setTimeout(tick, POLL_MS);
}

// A note above the page: the server has no GPU (kind "info"), or it cannot be read ("error").
function showNotice(kind, text) {
  const n = $("#notice");
  n.hidden = !text;
  n.className = kind === "error" ? "notice error" : "notice";
  n.dataset.kind = text ? kind : "";
  n.textContent = text || "";
}

async function loadDevices() {
  try {
    const { status, body } = await getJSON("/v1/device");
    if (status === 401) {
      showNotice("error", "This server needs a token to read: type it in the form's token field.");
      return;
    }
    if (status !== 200 || !body || !Array.isArray(body.devices)) {
      showNotice("error", `GET /v1/device answered ${status}: the device list is not available.`);
      return;
    }
    const gpus = body.devices.filter((d) => String(d.id || "").startsWith("cuda"));
    if (!gpus.length)
      showNotice("info", "No GPU on this server: only the cpu device serves here (backend reference, the fp64 " +
        "oracle). GPU backends answer 503 no_device.");
    else
      showNotice("info", "");
  } catch (e) {
    showNotice("error", "The server does not answer (GET /v1/device); retrying with every poll.");
  }
}

// ------------------------------------------------------------------------- rendering --

function render() {
  renderTable();
  renderShapes();
  renderCharts();
  if (selectedRun != null && runs.has(selectedRun)) renderDetail(runs.get(selectedRun));
}

function emptyText() {
  if (pollError) return `cannot read the history: ${pollError}`;
  if (!polledOnce) return "loading the history…";
  return "no runs yet: start one with the form above, or POST /v1/runs";
}

function renderTable() {
  const tbody = $("#runs tbody");
  if (!runs.size) {
    tbody.replaceChildren(el("tr", { class: "empty" }, el("td", { colSpan: 9, class: pollError ? "error" : "muted" }, emptyText())));
    return;
  }
  const seen = new Set([...tbody.children].map((tr) => Number(tr.dataset.id)));
  // Newest first by creation: in a fleet, ids are ranges per node and say nothing of time.
  const ids = [...runs.values()].sort(newestFirst).map((r) => r.id);
  const rows = ids.map((id) => {
    const r = runs.get(id);
    const tr = el("tr", { "data-id": id, "data-status": r.status, class: seen.has(id) ? "" : "new" },
      el("td", {}, id), el("td", { class: `status-${r.status}` }, r.status + (r.queue_position ? ` (#${r.queue_position})` : "")),
      el("td", {}, r.backend), el("td", { class: "node" }, r.node || ""), el("td", {}, deviceOf(r)), el("td", { class: "shape" }, shapeOf(r)),
      el("td", {}, fmt(median(r), 2)), el("td", {}, kernelsPerForward(r) ?? "–"), el("td", {}, r.created || ""));
    tr.addEventListener("click", () => { selectedRun = id; renderDetail(r); });
    return tr;
  });
  tbody.replaceChildren(...rows);
}

function renderShapes() {
  const sel = $("#shape");
  const byNewest = [...runs.values()].sort(newestFirst);
  const shapes = [...new Set(byNewest.map(shapeOf))];
  const current = sel.value;
  const want = shapeFollowsLatest && shapes.length ? shapes[0] : current;
  sel.replaceChildren(...shapes.map((s) => el("option", { value: s, selected: s === want }, s)));
  if (want) sel.value = want;
}

function barChart(svg, data, label) {
  // data: [{backend, value, run}] drawn as horizontal bars with the backend on the left.
  const W = Number(svg.getAttribute("width")), rowH = 24, left = 110, right = 70;
  svg.setAttribute("height", Math.max(60, 20 + data.length * rowH));
  const max = Math.max(1e-12, ...data.map((d) => d.value || 0));
  const kids = [];
  if (!data.length)
    kids.push(svgEl("text", { x: 10, y: 30, class: "empty" }, runs.size ? "no done run of this shape yet" : emptyText()));
  data.forEach((d, i) => {
    const y = 10 + i * rowH, w = d.value == null ? 0 : Math.max(1, (W - left - right) * d.value / max);
    const g = svgEl("g", { "data-backend": d.backend, "data-run": d.run });
    g.append(svgEl("text", { x: 4, y: y + 15 }, d.backend));
    const bar = svgEl("rect", { class: "bar", x: left, y: y + 3, width: w, height: rowH - 8, "data-run": d.run, "data-backend": d.backend });
    bar.append(svgEl("title", {}, `run ${d.run}: ${label(d.value, d)}`));
    bar.addEventListener("click", () => { selectedRun = d.run; renderDetail(runs.get(d.run)); });
    g.append(bar, svgEl("text", { x: left + w + 4, y: y + 15, class: "value" }, label(d.value, d)));
    kids.push(g);
  });
  svg.replaceChildren(...kids);
}

function renderCharts() {
  const shape = $("#shape").value;
  const latest = new Map();   // backend -> newest done run of this shape
  for (const r of runs.values())
    if (r.status === "done" && shapeOf(r) === shape && (!latest.has(r.backend) || newestFirst(r, latest.get(r.backend)) < 0))
      latest.set(r.backend, r);
  const list = [...latest.values()].sort((a, b) => a.backend.localeCompare(b.backend));
  barChart($("#chart-timing"), list.map((r) => ({ backend: r.backend, value: median(r), run: r.id })), (v) => `${fmt(v, 2)} µs`);
  barChart($("#chart-kernels"), list.map((r) => ({ backend: r.backend, value: kernelsPerForward(r), run: r.id,
    why: noKernelsWhy(r) })), (v, d) => (v == null ? `n/a (${d.why})` : String(v)));
}

// Why a done run has no kernel count: it did not ask for one, or it launched no GPU kernel.
function noKernelsWhy(r) {
  const p = r.params || {};
  if (p.profile === false) return "profile off";
  if (deviceOf(r) === "cpu") return "cpu run: no GPU kernels";
  return "no kernel table";
}

function renderDetail(r) {
  if (!r) return;
  $("#detail").hidden = false;
  $("#d-id").textContent = `${r.id} · ${r.backend} · ${r.status}`;
  // A trace is stored with a profiled GPU run's kernel table (GET /v1/runs/ID/trace), else 404.
  const hasTrace = r.status === "done" && !!(r.kernels && r.kernels.table);
  $("#d-trace").hidden = !hasTrace;
  $("#d-trace").href = hasTrace ? `/v1/runs/${r.id}/trace` : "#";
  $("#d-trace").download = `attnd-run-${r.id}-trace.json`;
  const summary = { shape: shapeOf(r), device: deviceOf(r), timing: r.timing, verify: r.verify ?? null,
                    error: r.error, perf: r.perf };
  $("#d-summary").textContent = JSON.stringify(summary, null, 1);
  const table = (r.kernels && r.kernels.table) || [];
  const rows = table.map((k) => el("tr", {},
    el("td", {}, k.kind), el("td", { class: "name" }, k.name), el("td", {}, k.calls), el("td", {}, fmt(k.gpu_us, 2)),
    el("td", {}, k.launch_api || ""), el("td", {}, k.grid ? k.grid.join("×") : ""), el("td", {}, k.block ? k.block.join("×") : ""),
    el("td", {}, k.regs ?? ""), el("td", {}, k.occupancy == null ? "" : fmt(k.occupancy * 100, 0) + "%")));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colSpan: 9, class: "muted" }, `no kernel table (${noKernelsWhy(r)})`)));
  $("#kernel-table tbody").replaceChildren(...rows);
}

// --------------------------------------------------------------------------- the form --

async function loadVariants() {
  const { status, body } = await getJSON("/v1/variants");
  if (status !== 200 || !body) return;
  const sel = $("#f-backend");
  sel.replaceChildren(...body.variants.map((v) =>
    el("option", { value: v.name, disabled: !v.available, title: v.why || v.summary || "" }, v.name + (v.available ? "" : " (unavailable)"))));
  sel.value = "reference";
}

// The model presets (GET /v1/models), by name; the form's fields that a preset sets.
const presets = {};
const PRESET_FIELDS = ["heads", "kv_heads", "head_dim", "head_dim_v", "window"];

async function loadModels() {
  const { status, body } = await getJSON("/v1/models");
  if (status !== 200 || !body) return;
  for (const m of body.models) presets[m.name] = m;
  $("#f-model").append(...body.models.map((m) => el("option", { value: m.name, title: m.source || "" }, m.name)));
}

// A preset chosen: its values in the form, the fields it leaves out emptied (their defaults).
function applyPreset() {
  const m = presets[$("#f-model").value];
  if (!m) return;
  const f = $("#run-form");
  for (const name of PRESET_FIELDS) f.elements[name].value = m[name] ?? "";
}

function formBody() {
  const f = $("#run-form"), body = {};
  const preset = presets[f.elements.model.value];
  for (const name of ["backend", "device", "dtype", "mask", "model"]) if (f.elements[name].value) body[name] = f.elements[name].value;
  for (const name of ["batch", "heads", "kv_heads", "seq", "head_dim", "head_dim_v", "window", "warmup", "iters", "seed"]) {
    const text = f.elements[name].value;
    if (text === "") continue;
    // With a preset, only what differs from it is sent: the record says what was overridden.
    if (preset && PRESET_FIELDS.includes(name) && Number(text) === preset[name]) continue;
    body[name] = Number(text);
  }
  body.profile = f.elements.profile.checked;
  body.verify = f.elements.verify.checked;
  return body;
}

async function submitRun(ev) {
  ev.preventDefault();
  const out = $("#form-status");
  const body = formBody();
  out.textContent = "starting…";
  out.className = "muted";
  try {
    const { status, body: resp } = await getJSON("/v1/runs?async=true", {
      method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    if (status !== 202) {
      out.textContent = `refused (${status}): ${resp && resp.error ? resp.error.message : "?"}`;
      out.className = "error";
      return;
    }
    out.textContent = `started run ${resp.id} (queue position ${resp.queue_position})`;
    out.dataset.runId = resp.id;
    selectedRun = resp.id;
    shapeFollowsLatest = true;     // show the new run's shape in the charts
    await pollHistory();
    render();
  } catch (e) {
    out.textContent = `error: ${e.message}`;
    out.className = "error";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  $("#run-form").addEventListener("submit", submitRun);
  $("#f-token").value = sessionStorage.getItem("attnd-token") || "";
  $("#f-token").addEventListener("change", (e) => sessionStorage.setItem("attnd-token", e.target.value));
  $("#shape").addEventListener("change", () => { shapeFollowsLatest = false; renderCharts(); });
  render();                      // the empty states, before the first answer
  $("#f-model").addEventListener("change", applyPreset);
  loadDevices();
  loadModels();
  loadVariants().finally(tick);
});
