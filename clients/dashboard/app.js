// attnd dashboard (docs/dashboard.md). Plain browser JavaScript, no libraries, no build.
// charts.js draws, history.js is the history view, study.js the study view; this file
// holds the state, the polling, the runs table, a run's detail, the form and the deep links.
//
// State: every run seen, by id. New runs come from polling GET /v1/runs?after=<cursor>
// (each run is seen there exactly once, when it is first stored); runs not yet final
// (queued, running) are refreshed with GET /v1/runs/<id> until they are. The shape chart
// also reads every stored run of its shape (GET /v1/runs with the shape's filters).
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
const shapeRuns = new Map();     // shape text -> Map(id -> record): every stored done run of it

const $ = (sel) => document.querySelector(sel);

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("data-")) e.setAttribute(k, v); else e[k] = v;
  }
  for (const k of kids) e.append(k instanceof Node ? k : document.createTextNode(k == null ? "" : String(k)));
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

const query = (params) => Object.entries(params).filter(([, v]) => v != null && v !== "")
  .map(([k, v]) => `${encodeURIComponent(k)}=${encodeURIComponent(v)}`).join("&");

// ------------------------------------------------------------------ shapes and fields --

function shapeOf(rec) {
  const p = rec.params || {};
  const kv = p.kv_heads != null && p.kv_heads !== p.heads ? ` Hkv${p.kv_heads}` : "";
  const dv = p.head_dim_v != null && p.head_dim_v !== p.head_dim ? ` Dv${p.head_dim_v}` : "";
  const win = p.window != null ? ` W${p.window}` : "";
  const paged = p.page_size ? ` P${p.page_size}` : "";
  const lens = (name, v) => v == null ? "" : ` ${name}=${(typeof v === "object" && !Array.isArray(v)
    ? `${v.dist}:${v.min}:${v.max}` : String(v)).slice(0, 24)}`;
  return `B${p.batch} H${p.heads}${kv} Sq${p.seq_q} Skv${p.seq_kv} D${p.head_dim}${dv}${win} ${p.dtype} ${p.mask}` +
         `${paged}${lens("lens_q", p.seqlens_q)}${lens("lens_kv", p.seqlens_kv)}`;
}
const median = (rec) => (rec.timing && typeof rec.timing.median_us === "number") ? rec.timing.median_us : null;
const kernelsPerForward = (rec) => (rec.kernels && typeof rec.kernels.per_forward === "number") ? rec.kernels.per_forward : null;
// Order of runs, newest first: created (ISO-8601 UTC text sorts as time), then id.
const newestFirst = (a, b) => (b.created || "").localeCompare(a.created || "") || b.id - a.id;
const deviceOf = (rec) => (rec.device && rec.device.id) || (rec.params && rec.params.device) || "";
const gpuOf = (rec) => (rec.device && rec.device.name) || "";
const implOf = (rec) => rec.impl_used || (rec.params && rec.params.impl) || null;
const commitOf = (rec) => (rec.build && rec.build.commit) || "";
const fmt = (x, d = 1) => x == null ? "–" : Number(x).toFixed(d);

// What else than the shape decides a run's time: its backend and implementation, the
// cache and graph settings, the node and the device (with the GPU's name). Runs that
// differ in any of these are drawn apart, never one in place of another.
function setupOf(rec) {
  const p = rec.params || {};
  const impl = implOf(rec);
  return { backend: rec.backend + (impl ? `:${impl}` : ""), cache: p.cache || "hot", graph: p.graph ? "graph" : "",
           node: rec.node || "", device: deviceOf(rec), gpu: gpuOf(rec) };
}
const SETUP_FIELDS = ["backend", "cache", "graph", "node", "device", "gpu"];
const setupKey = (rec) => SETUP_FIELDS.map((f) => setupOf(rec)[f]).join("|");

// verify.pass of a run: "pass", "fail", or null when it did not verify.
function verifyOf(rec) {
  const v = rec.verify;
  if (!v || typeof v.pass !== "boolean") return null;
  return v.pass ? "pass" : "fail";
}

// A fraction as a percentage, a tiny one (a target of 1e-9) still readable.
const percent = (x) => x * 100 >= 0.01 || x === 0 ? `${fmt(x * 100, 2)}%` : `${(x * 100).toExponential(1)}%`;

// A run whose stopping rule missed its noise target: timing.rse ended above target_noise
// (it stopped on max_time or max_iters instead, or ran a fixed count that could not reach
// it). Its median is noisier than asked for. null when the target was met or there is no rse.
function noiseMiss(rec) {
  const t = rec.timing || {}, target = rec.params && rec.params.target_noise;
  if (typeof t.rse !== "number" || typeof target !== "number" || !(t.rse > target)) return null;
  return { rse: t.rse, target, stop: t.stop_reason || "?",
           text: `noise target missed: rse ${percent(t.rse)} > target ${percent(target)} (stopped: ${t.stop_reason || "?"})` };
}

function runTitle(r) {
  const t = r.timing || {}, n = noiseMiss(r), v = verifyOf(r);
  return [`run ${r.id}: ${fmt(median(r), 2)} µs (p10 ${fmt(t.p10_us, 2)}, p90 ${fmt(t.p90_us, 2)})`,
          `${setupOf(r).backend} on ${r.node || "?"} ${deviceOf(r)} ${gpuOf(r)}`, `commit ${commitOf(r) || "?"} · ${r.created || ""}`,
          n ? n.text : "", v === "fail" ? "VERIFY FAILED" : ""].filter(Boolean).join("\n");
}

// The marks of a run in a chart: noise target missed, verify failed.
const runClass = (r) => [noiseMiss(r) ? "noisy" : "", verifyOf(r) === "fail" ? "vfail" : ""].join(" ").trim();

// ------------------------------------------------------------------- deep links --

// The page's state in its URL's hash: #run=ID, #study=ID, the shape of the chart and the
// history view's filters, series and baseline. Loading such a URL restores the view.
const HASH_KEYS = ["run", "study", "shape", "backend", "dtype", "mask", "gpu", "commit", "tag", "series", "base"];
const view = {};

function readHash() {
  const h = new URLSearchParams(location.hash.replace(/^#/, ""));
  for (const k of HASH_KEYS) view[k] = h.get(k) || "";
}

function writeHash() {
  const h = new URLSearchParams();
  for (const k of HASH_KEYS) if (view[k]) h.set(k, view[k]);
  const text = h.toString();
  if (location.hash.replace(/^#/, "") !== text)
    history.replaceState(null, "", text ? `#${text}` : location.pathname + location.search);
}

function setView(changes) {
  Object.assign(view, changes);
  writeHash();
}

// The hash was edited or a link followed: show what it names.
async function applyHash() {
  readHash();
  if (view.shape) { shapeFollowsLatest = false; await loadShape(view.shape); }
  historyFromView();
  if (view.run) await showRun(Number(view.run)); else { selectedRun = null; $("#detail").hidden = true; }
  if (view.study) openStudy(Number(view.study)); else closeStudy();
  render();
}

// ------------------------------------------------------------------------- polling --

async function pollHistory() {
  const fresh = [];
  for (let page = 0; page < 200; page++) {       // catch up on a long history, page by page
    const { status, body } = await getJSON(`/v1/runs?after=${cursor}&limit=1000`);
    if (status !== 200 || !body) throw new Error(`GET /v1/runs answered ${status}`);
    for (const rec of body.runs) { runs.set(rec.id, rec); fresh.push(rec); }
    cursor = body.next_after;
    if (body.runs.length < 1000) break;
  }
  // Forget the oldest beyond KEEP (the selected run stays).
  if (runs.size > KEEP) {
    const ids = [...runs.keys()].sort((a, b) => a - b);
    for (const id of ids.slice(0, ids.length - KEEP)) if (id !== selectedRun) runs.delete(id);
  }
  // Follow the runs that are not final yet.
  const open = [...runs.values()].filter((r) => !FINAL.has(r.status));
  await Promise.all(open.map(async (r) => {
    const { status, body } = await getJSON(`/v1/runs/${r.id}`);
    if (status === 200 && body) { runs.set(r.id, body); fresh.push(body); }
  }));
  for (const r of fresh) noteRun(r);
  historyNoteRuns(fresh);
}

// A run seen (new, or final now): into its shape's set when that shape is loaded.
function noteRun(r) {
  if (r.status !== "done" || median(r) == null) return;
  const set = shapeRuns.get(shapeOf(r));
  if (set) set.set(r.id, r);
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
  pollStudy();
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
    if (!gpus.length) {
      showNotice("info", "No GPU on this server: only the cpu device serves here (backend reference, the fp64 " +
        "oracle). GPU backends answer 503 no_device; the default shape is too costly for the cpu.");
      $("#notice").append(el("button", { type: "button", id: "small-cpu-run", onclick: fillSmallCpuRun },
                             "fill in a small cpu run"));
    } else
      showNotice("info", "");
  } catch (e) {
    showNotice("error", "The server does not answer (GET /v1/device); retrying with every poll.");
  }
}

// Every stored done run of a shape, from the history (newest 1000), its filters from the
// shape's own fields; the runs that differ in what the filters cannot say (no window,
// ragged lengths) are dropped by comparing the shape's text.
// The run parameters a shape's text names (shapeOf's words), for the history's filters.
function parseShape(text) {
  const p = {}, words = String(text).split(" ");
  const num = { B: "batch", H: "heads", Hkv: "kv_heads", Sq: "seq_q", Skv: "seq_kv", D: "head_dim", Dv: "head_dim_v",
                W: "window", P: "page_size" };
  for (const w of words) {
    const m = /^(Hkv|Skv|Sq|Dv|B|H|D|W|P)(\d+)$/.exec(w);
    if (m) p[num[m[1]]] = Number(m[2]);
    else if (["bf16", "fp16", "fp32"].includes(w)) p.dtype = w;
    else if (["none", "causal", "causal_bottom_right"].includes(w)) p.mask = w;
  }
  if (p.kv_heads == null) p.kv_heads = p.heads;
  if (p.head_dim_v == null) p.head_dim_v = p.head_dim;
  return p;
}

async function loadShape(shape) {
  if (!shape || shapeRuns.has(shape)) return;
  const p = parseShape(shape);
  if (p.batch == null || p.seq_q == null) return;
  const filters = { status: "done", order: "newest", limit: 1000, batch: p.batch, heads: p.heads, kv_heads: p.kv_heads,
                    seq_q: p.seq_q, seq_kv: p.seq_kv, head_dim: p.head_dim, head_dim_v: p.head_dim_v,
                    window: p.window, dtype: p.dtype, mask: p.mask };
  const set = new Map();
  shapeRuns.set(shape, set);
  try {
    const { status, body } = await getJSON(`/v1/runs?${query(filters)}`);
    if (status === 200 && body)
      for (const r of body.runs) if (shapeOf(r) === shape && median(r) != null) set.set(r.id, r);
  } catch (e) { /* the poll says when the server is away */ }
  for (const r of runs.values()) noteRun(r);
}

// ------------------------------------------------------------------------- rendering --

function render() {
  renderTable();
  renderShapes();
  renderCharts();
  if (selectedRun != null && runs.has(selectedRun)) renderDetail(runs.get(selectedRun));
  renderHistory();
}

function emptyText() {
  if (pollError) return `cannot read the history: ${pollError}`;
  if (!polledOnce) return "loading the history…";
  return "no runs yet: start one with the form above, or POST /v1/runs";
}

const TABLE_COLS = 11;

function verifyCell(r) {
  const v = verifyOf(r);
  if (!v) return el("td", { class: "verify muted" }, "–");
  const e = r.verify;
  return el("td", { class: `verify verify-${v}`, title: v === "fail"
    ? `verify failed: ${e.nan ? `${e.nan} NaN/Inf` : `max_abs_err ${e.max_abs_err}, rel_l2_err ${e.rel_l2_err}`} (tol ${JSON.stringify(e.tol)})`
    : `rel_l2_err ${e.rel_l2_err} against ${e.reference}` }, v === "pass" ? "✓ pass" : "✗ FAIL");
}

function noiseCell(r) {
  const n = noiseMiss(r);
  return n ? el("td", { class: "noise noisy", title: n.text }, `⚠ ${n.stop}`) : el("td", { class: "noise" }, "");
}

function renderTable() {
  const tbody = $("#runs tbody");
  if (!runs.size) {
    tbody.replaceChildren(el("tr", { class: "empty" }, el("td", { colSpan: TABLE_COLS, class: pollError ? "error" : "muted" }, emptyText())));
    return;
  }
  const seen = new Set([...tbody.children].map((tr) => Number(tr.dataset.id)));
  // Newest first by creation: in a fleet, ids are ranges per node and say nothing of time.
  const ids = [...runs.values()].sort(newestFirst).map((r) => r.id);
  const rows = ids.map((id) => {
    const r = runs.get(id);
    const tr = el("tr", { "data-id": id, "data-status": r.status, "data-verify": verifyOf(r) || "",
                          "data-noise": noiseMiss(r) ? "missed" : "", class: seen.has(id) ? "" : "new" },
      el("td", {}, id), el("td", { class: `status-${r.status}` }, r.status + (r.queue_position ? ` (#${r.queue_position})` : "")),
      el("td", {}, r.backend), el("td", { class: "node" }, r.node || ""), el("td", {}, deviceOf(r)), el("td", { class: "shape" }, shapeOf(r)),
      el("td", {}, fmt(median(r), 2)), noiseCell(r), verifyCell(r), el("td", {}, kernelsPerForward(r) ?? "–"),
      el("td", {}, r.created || ""));
    tr.addEventListener("click", () => pickRun(id));
    return tr;
  });
  tbody.replaceChildren(...rows);
}

function renderShapes() {
  const sel = $("#shape");
  const byNewest = [...runs.values()].sort(newestFirst);
  const shapes = [...new Set(byNewest.map(shapeOf))];
  const current = view.shape || sel.value;
  if (current && !shapes.includes(current)) shapes.push(current);
  const want = shapeFollowsLatest && shapes.length ? shapes[0] : current;
  sel.replaceChildren(...shapes.map((s) => el("option", { value: s, selected: s === want }, s)));
  if (want) sel.value = want;
  if (want && !shapeRuns.has(want) && [...runs.values()].some((r) => shapeOf(r) === want))
    loadShape(want).then(renderCharts);
}

// The runs of the chosen shape, one row per setup; a row's label names what differs
// between the rows (the backend always), the caption what they share.
function renderCharts() {
  const shape = $("#shape").value;
  const set = new Map(shapeRuns.get(shape) || []);
  for (const r of runs.values()) if (r.status === "done" && median(r) != null && shapeOf(r) === shape) set.set(r.id, r);
  const groups = new Map();
  for (const r of [...set.values()].sort((a, b) => -newestFirst(a, b))) {
    const k = setupKey(r);
    if (!groups.has(k)) groups.set(k, []);
    groups.get(k).push(r);
  }
  const setups = [...groups.values()].map((rs) => setupOf(rs[0]));
  const varies = SETUP_FIELDS.filter((f) => f === "backend" || new Set(setups.map((s) => s[f])).size > 1);
  const shared = SETUP_FIELDS.filter((f) => !varies.includes(f)).map((f) => setups.length ? setups[0][f] : "").filter(Boolean);
  const label = (s) => varies.map((f) => s[f]).filter(Boolean).join(" · ");
  const rows = [...groups.entries()].map(([key, rs]) => ({ key, label: label(setupOf(rs[0])),
    title: SETUP_FIELDS.map((f) => `${f}: ${setupOf(rs[0])[f] || "–"}`).join("\n"),
    runs: rs.map((r) => ({ id: r.id, median: median(r), p10: r.timing.p10_us, p90: r.timing.p90_us, cls: runClass(r), title: runTitle(r) })),
    newest: rs[rs.length - 1] })).sort((a, b) => a.label.localeCompare(b.label));
  const empty = runs.size ? "no done run of this shape yet" : emptyText();
  $("#shape-shared").textContent = shared.length ? `all on ${shared.join(" · ")}` : "";
  dotPlot($("#chart-timing"), rows, { unit: "µs", onPick: pickRun, empty });
  barChart($("#chart-kernels"), rows.map((row) => {
    const withCount = [...row.runs].reverse().map((x) => set.get(x.id)).find((r) => kernelsPerForward(r) != null);
    const r = withCount || row.newest;
    const v = kernelsPerForward(r);
    return { key: row.key, label: row.label, value: v, run: r.id, text: v == null ? `n/a (${noKernelsWhy(r)})` : String(v),
             title: `run ${r.id}: ${v == null ? noKernelsWhy(r) : `${v} kernels per forward`}` };
  }), { empty, onPick: pickRun });
}

// Why a done run has no kernel count: it did not ask for one, or it launched no GPU kernel.
function noKernelsWhy(r) {
  const p = r.params || {};
  if (p.profile === false) return "profile off";
  if (deviceOf(r) === "cpu") return "cpu run: no GPU kernels";
  return "no kernel table";
}

// A run chosen (a row, a dot, a bar): its detail, and its id in the URL.
function pickRun(id) {
  selectedRun = id;
  setView({ run: String(id) });
  if (runs.has(id)) renderDetail(runs.get(id)); else showRun(id);
}

// #run=ID: the run's detail, read from the server when the page does not hold it.
async function showRun(id) {
  selectedRun = id;
  if (!runs.has(id)) {
    const { status, body } = await getJSON(`/v1/runs/${id}`);
    if ((status === 200 || status === 500) && body && body.id === id) runs.set(id, body);
    else {
      $("#detail").hidden = false;
      $("#d-id").textContent = `${id}: not found (GET /v1/runs/${id} answered ${status})`;
      $("#d-flags").replaceChildren();
      $("#d-summary").textContent = body ? JSON.stringify(body, null, 1) : "";
      $("#kernel-table tbody").replaceChildren();
      $("#d-trace").hidden = true;
      return;
    }
  }
  renderDetail(runs.get(id));
  $("#detail").scrollIntoView({ block: "nearest" });
}

function renderDetail(r) {
  if (!r) return;
  $("#detail").hidden = false;
  $("#detail").dataset.run = r.id;
  $("#d-id").textContent = `${r.id} · ${r.backend} · ${r.status}`;
  $("#d-link").href = `#run=${r.id}`;
  // A trace is stored with a profiled GPU run's kernel table (GET /v1/runs/ID/trace), else 404.
  const hasTrace = r.status === "done" && !!(r.kernels && r.kernels.table);
  $("#d-trace").hidden = !hasTrace;
  $("#d-trace").href = hasTrace ? `/v1/runs/${r.id}/trace` : "#";
  $("#d-trace").download = `attnd-run-${r.id}-trace.json`;
  const flags = [];
  const v = verifyOf(r), n = noiseMiss(r);
  if (v === "fail") flags.push(el("span", { class: "flag vfail" }, `✗ verify failed${r.verify.nan ? ` (${r.verify.nan} NaN/Inf)` : ""}`));
  if (v === "pass") flags.push(el("span", { class: "flag pass" }, `✓ verify passed (rel_l2_err ${r.verify.rel_l2_err})`));
  if (n) flags.push(el("span", { class: "flag noisy" }, `⚠ ${n.text}`));
  $("#d-flags").replaceChildren(...flags);
  const summary = { shape: shapeOf(r), setup: setupOf(r), commit: commitOf(r), timing: r.timing, verify: r.verify ?? null,
                    error: r.error, perf: r.perf, study: r.study };
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
  $("#h-backend").append(...body.variants.map((v) => el("option", { value: v.name }, v.name)));
  if (view.backend) $("#h-backend").value = view.backend;
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

// The form's empty fields show the API's defaults (GET /openapi.json, RunParams): an empty
// field is not sent, so the server applies that default, the same as for any client.
const FORM_NUMBERS = ["batch", "heads", "kv_heads", "seq", "seq_q", "seq_kv", "head_dim", "head_dim_v", "window",
                      "page_size", "num_pages", "warmup", "iters", "seed"];
const DEFAULT_WORDS = { kv_heads: "= heads", seq_q: "= seq", seq_kv: "= seq", head_dim_v: "= head_dim", window: "none",
                        page_size: "0 (contiguous)", num_pages: "needed + 25%", iters: "0 (rule)" };
// Sent as written: the server reads 128,512,77, uniform:MIN:MAX or a tensor id in a body too.
const FORM_TEXTS = ["seqlens_q", "seqlens_kv"];

async function loadFormDefaults() {
  let props = null;
  try {
    const { status, body } = await getJSON("/openapi.json");
    props = status === 200 && body && body.components && body.components.schemas.RunParams.properties;
  } catch (e) { /* the placeholders keep saying "server default" */ }
  if (!props) return;
  const f = $("#run-form");
  for (const name of FORM_NUMBERS) {
    const d = props[name] && props[name].default;
    f.elements[name].placeholder = DEFAULT_WORDS[name] || (d == null ? "server default" : String(d));
    if (d != null) f.elements[name].dataset.apiDefault = d;
  }
}

// The no-GPU note's button: a run that the cpu device does in milliseconds.
function fillSmallCpuRun() {
  const f = $("#run-form"), small = { device: "cpu", batch: 1, heads: 2, seq: 64, head_dim: 8 };
  f.elements.backend.value = "reference";
  for (const [k, v] of Object.entries(small)) f.elements[k].value = v;
  $("#start").scrollIntoView({ block: "start" });
}

function formBody() {
  const f = $("#run-form"), body = {};
  const preset = presets[f.elements.model.value];
  for (const name of ["backend", "device", "dtype", "mask", "model", ...FORM_TEXTS]) {
    const text = f.elements[name].value.trim();
    if (text) body[name] = text;
  }
  for (const name of FORM_NUMBERS) {
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
    setView({ run: String(resp.id), shape: "" });
    shapeFollowsLatest = true;     // show the new run's shape in the charts
    await pollHistory();
    render();
  } catch (e) {
    out.textContent = `error: ${e.message}`;
    out.className = "error";
  }
}

document.addEventListener("DOMContentLoaded", () => {
  readHash();
  $("#run-form").addEventListener("submit", submitRun);
  $("#f-token").value = sessionStorage.getItem("attnd-token") || "";
  $("#f-token").addEventListener("change", (e) => sessionStorage.setItem("attnd-token", e.target.value));
  $("#shape").addEventListener("change", () => {
    shapeFollowsLatest = false;
    setView({ shape: $("#shape").value });
    loadShape($("#shape").value).then(renderCharts);
    renderCharts();
  });
  $("#d-baseline").addEventListener("click", () => selectedRun != null && useRunAsBaseline(runs.get(selectedRun)));
  $("#d-series").addEventListener("click", () => selectedRun != null && showSeriesOf(runs.get(selectedRun)));
  window.addEventListener("hashchange", applyHash);
  // The header's links scroll to a section; the hash keeps saying what is shown.
  for (const a of document.querySelectorAll("nav a[data-goto]"))
    a.addEventListener("click", (e) => { e.preventDefault(); document.getElementById(a.dataset.goto).scrollIntoView(); });
  initHistory();
  initStudy();
  render();                      // the empty states, before the first answer
  $("#f-model").addEventListener("change", applyPreset);
  loadDevices();
  loadModels();
  loadFormDefaults();
  // The first poll, then what the URL names (its run, shape and study), then the live loop.
  loadVariants().finally(async () => {
    try { await pollHistory(); polledOnce = true; } catch (e) { /* tick says so */ }
    await applyHash();
    tick();
  });
});
