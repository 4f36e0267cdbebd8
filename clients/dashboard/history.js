// attnd dashboard: the history view (docs/dashboard.md). One series at a time, a series
// being the runs of one shape on one backend (and implementation) and one GPU, drawn over
// time with the runs of each commit on a band of their own; optionally as the ratio to a
// baseline (a run, or the median of a commit's runs).
//
// The series come from GET /v1/runs?group_by=… (every series of the history, with its
// count), a series' runs from GET /v1/runs with its fields as filters, newest first. With a
// baseline, each commit's runs are compared with it by GET /v1/compare: the ratio with its
// interval and whether it is beyond noise (docs/api.md, Compare).
"use strict";

const COMPARE_RUNS = 100;        // GET /v1/compare takes at most this many runs a side
const compared = new Map();      // "base|run" of GET /v1/compare -> its answer, or "pending"

const SERIES_GROUP = ["backend", "impl", "gpu", "batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim",
                      "head_dim_v", "window", "dtype", "mask", "page_size", "ragged"];
const HISTORY_FILTERS = ["backend", "dtype", "mask", "gpu", "commit", "tag"];
const SERIES_RUNS = 1000;        // the newest this many runs of a series are drawn

let seriesList = [];             // [{key, group}] of GET /v1/runs?group_by=
let seriesRuns = new Map();      // id -> record of the series shown
let seriesShown = "";            // its key
let historyNote = "";            // what the view says instead of a chart (an error, nothing found)
let seriesListAt = 0;            // when the list was read (ms), to re-read it when runs come

// A series' shape: a ragged batch is one series whatever its lengths (the groups say only
// whether a run was ragged), a paged cache one per page size.
const seriesShapeOf = (p, ragged) =>
  shapeOf({ params: Object.assign({}, p, { seqlens_q: null, seqlens_kv: null }) }) + (ragged ? " ragged" : "");
const seriesKeyOf = (rec) => {
  const p = rec.params || {};
  return `${setupOf(rec).backend} · ${gpuOf(rec) || "?"} · ${seriesShapeOf(p, p.seqlens_q != null || p.seqlens_kv != null)}`;
};
const seriesKeyOfGroup = (g) =>
  `${g.backend}${g.impl ? `:${g.impl}` : ""} · ${g.gpu || "?"} · ${seriesShapeOf(g, g.ragged === true)}`;

function historyFilters() {
  const f = {};
  for (const k of HISTORY_FILTERS) if (view[k]) f[k] = view[k];
  return f;
}

// A run the filters select (the server applies them to what it lists; runs that come by
// polling are checked here).
function passesFilters(r) {
  const p = r.params || {};
  return (!view.backend || r.backend === view.backend) && (!view.dtype || p.dtype === view.dtype) &&
         (!view.mask || p.mask === view.mask) && (!view.gpu || gpuOf(r) === view.gpu) &&
         (!view.commit || commitOf(r) === view.commit) && (!view.tag || (p.tags || []).includes(view.tag));
}

function initHistory() {
  for (const k of HISTORY_FILTERS)
    $(`#h-${k}`).addEventListener("change", () => {
      setView({ [k]: $(`#h-${k}`).value.trim(), series: "", base: "" });
      loadSeriesList();
    });
  $("#h-series").addEventListener("change", () => { setView({ series: $("#h-series").value, base: "" }); loadSeriesRuns(); });
  $("#h-base").addEventListener("change", () => { setView({ base: $("#h-base").value }); renderHistory(); });
}

// The view's filters, series and baseline as the URL has them (a deep link, or the back button).
function historyFromView() {
  for (const k of HISTORY_FILTERS) if ($(`#h-${k}`)) $(`#h-${k}`).value = view[k] || "";
  loadSeriesList();
}

async function loadSeriesList() {
  seriesListAt = Date.now();
  let resp;
  try {
    resp = await getJSON(`/v1/runs?${query(Object.assign({ group_by: SERIES_GROUP.join(","), limit: 1000, status: "done" },
                                                         historyFilters()))}`);
  } catch (e) {
    historyNote = "the server does not answer";
    return renderHistory();
  }
  if (resp.status !== 200 || !resp.body) {
    const err = resp.body && resp.body.error;
    historyNote = `GET /v1/runs answered ${resp.status}${err ? `: ${err.message}` : ""}`;
    seriesList = [];
    seriesRuns = new Map();
    seriesShown = "";
    return renderHistory();
  }
  seriesList = resp.body.groups.map((g) => ({ key: seriesKeyOfGroup(g), group: g }));
  historyNote = seriesList.length ? "" : "no done run matches these filters";
  // The series shown: the URL's, else the one of the newest run that the filters select.
  if (!view.series || !seriesList.some((s) => s.key === view.series)) {
    const newest = [...runs.values()].filter((r) => r.status === "done" && median(r) != null && passesFilters(r))
      .sort(newestFirst).map(seriesKeyOf).find((k) => seriesList.some((s) => s.key === k));
    if (!view.series) setView({ series: newest || (seriesList[0] && seriesList[0].key) || "" });
  }
  const sel = $("#h-series");
  sel.replaceChildren(...seriesList.map((s) => el("option", { value: s.key },
    `${s.key} — ${s.group.count} run${s.group.count === 1 ? "" : "s"}, median ${fmtNum(s.group.median_us)} µs`)));
  if (view.series && !seriesList.some((s) => s.key === view.series))
    sel.append(el("option", { value: view.series }, `${view.series} — not in the history (with these filters)`));
  sel.value = view.series;
  await loadSeriesRuns();
}

async function loadSeriesRuns() {
  const key = view.series;
  const s = seriesList.find((x) => x.key === key);
  seriesShown = key;
  seriesRuns = new Map();
  if (!s) { renderHistory(); return; }
  const g = s.group, f = Object.assign({ order: "newest", limit: SERIES_RUNS, status: "done" }, historyFilters());
  for (const k of SERIES_GROUP) if (g[k] != null) f[k] = g[k];   // no window, no impl: checked below
  try {
    const { status, body } = await getJSON(`/v1/runs?${query(f)}`);
    if (status === 200 && body) {
      for (const r of body.runs) if (seriesKeyOf(r) === key && median(r) != null) seriesRuns.set(r.id, r);
    } else {
      historyNote = `GET /v1/runs answered ${status}`;
    }
  } catch (e) {
    historyNote = "the server does not answer";
  }
  renderHistory();
}

// Runs that came by polling: into the series shown when they belong; a series not listed
// yet makes the list be read again (at most every 5 s).
function historyNoteRuns(fresh) {
  let added = false, unknown = false;
  for (const r of fresh) {
    if (r.status !== "done" || median(r) == null || !passesFilters(r)) continue;
    const key = seriesKeyOf(r);
    if (key === seriesShown) { seriesRuns.set(r.id, r); added = true; }
    if (!seriesList.some((s) => s.key === key)) unknown = true;
  }
  if (unknown && Date.now() - seriesListAt > 5000) loadSeriesList();
  else if (added) renderHistory();
}

// The baseline of view.base: {value, label} or {missing: why}.
function baselineOf(list) {
  const [kind, what] = (view.base || "").split(/:(.*)/s);
  if (!kind) return null;
  if (kind === "run") {
    const r = seriesRuns.get(Number(what)) || runs.get(Number(what));
    if (!r || median(r) == null) return { missing: `run ${what} is not a done run of this series` };
    return { value: median(r), label: `run ${r.id} (${fmtNum(median(r))} µs)` };
  }
  if (kind === "commit") {
    const m = medianOf(list.filter((r) => commitOf(r) === what).map(median));
    if (m == null) return { missing: `no run of commit ${what} in this series` };
    return { value: m, label: `commit ${what} (median ${fmtNum(m)} µs)` };
  }
  return { missing: `unknown baseline ${view.base}` };
}

function renderHistory() {
  const svg = $("#chart-history");
  if (!svg) return;
  const list = [...seriesRuns.values()].sort((a, b) => -newestFirst(a, b));
  // Setups within the series (cache, graph, node, device): each its own colour when several.
  const setupKeys = [...new Set(list.map(setupKey))];
  const base = baselineOf(list);
  const scale = base && base.value ? base.value : null;
  const points = list.map((r) => ({ id: r.id, value: median(r) / (scale || 1), low: r.timing.p10_us / (scale || 1),
    high: r.timing.p90_us / (scale || 1), commit: commitOf(r), created: r.created,
    cls: [runClass(r), setupKeys.length > 1 ? `s${setupKeys.indexOf(setupKey(r)) % 6}` : ""].join(" ").trim(),
    title: runTitle(r) + (scale ? `\nratio to the baseline: ${fmt(median(r) / scale, 3)}` : "") }));
  const empty = historyNote || (view.series ? "no done run in this series" : "no series: no done run yet");
  trendChart(svg, points, { unit: scale ? "ratio to the baseline" : "µs", ref: scale ? 1 : null, onPick: pickRun, empty });
  $("#h-legend").replaceChildren(...(setupKeys.length > 1 ? setupKeys.map((k, i) =>
    el("span", { class: `legend s${i % 6}` }, `● ${k.split("|").filter(Boolean).join(" · ")}`)) : []));
  $("#h-base-note").textContent = base ? (base.missing || `ratios to ${base.label}`) : "";
  $("#h-base-note").className = base && base.missing ? "error" : "muted";
  // The baseline choices: none, each commit of the series, its newest runs.
  const commits = [];
  for (const r of list) {
    const c = commitOf(r);
    let e = commits.find((x) => x.commit === c);
    if (!e) commits.push(e = { commit: c, runs: [] });
    e.runs.push(r);
  }
  const sel = $("#h-base"), keep = view.base;
  const opts = [el("option", { value: "" }, "none: times in µs")];
  for (const c of [...commits].reverse())
    opts.push(el("option", { value: `commit:${c.commit}` }, `commit ${c.commit || "?"} · ${c.runs.length} runs · ${fmtNum(medianOf(c.runs.map(median)))} µs`));
  for (const r of [...list].reverse().slice(0, 30))
    opts.push(el("option", { value: `run:${r.id}` }, `run ${r.id} · ${(r.created || "").slice(0, 16)} · ${fmtNum(median(r))} µs`));
  if (keep && !opts.some((o) => o.value === keep)) opts.push(el("option", { value: keep }, `${keep} (not in this series)`));
  sel.replaceChildren(...opts);
  sel.value = keep || "";
  // Per commit, oldest first: the runs, their median of medians and spread, the ratio.
  $("#h-commits tbody").replaceChildren(...(commits.length ? commits.map((c) => {
    const m = medianOf(c.runs.map(median)), meds = c.runs.map(median);
    const noisy = c.runs.filter(noiseMiss).length, failed = c.runs.filter((r) => verifyOf(r) === "fail").length;
    return el("tr", { "data-commit": c.commit },
      el("td", { class: "mono" }, c.commit || "?"), el("td", {}, c.runs.length),
      el("td", {}, (c.runs[0].created || "").slice(0, 16).replace("T", " ")),
      el("td", {}, (c.runs[c.runs.length - 1].created || "").slice(0, 16).replace("T", " ")),
      el("td", {}, fmt(m, 2)), el("td", {}, fmt(Math.min(...meds), 2)), el("td", {}, fmt(Math.max(...meds), 2)),
      el("td", { class: "ratio" }, scale ? fmt(m / scale, 3) : "–"),
      compareCell(baseSideOf(list), c.runs),
      el("td", { class: noisy || failed ? "error" : "muted" },
         [noisy ? `${noisy} noisy` : "", failed ? `${failed} verify failed` : ""].filter(Boolean).join(", ") || "–"));
  }) : [el("tr", {}, el("td", { colSpan: 10, class: "muted" }, empty))]));
}

// The baseline as a side of GET /v1/compare: a run's id, or the ids of a commit's newest runs.
function baseSideOf(list) {
  const [kind, what] = (view.base || "").split(/:(.*)/s);
  if (kind === "run") return what;
  if (kind === "commit")
    return list.filter((r) => commitOf(r) === what).slice(-COMPARE_RUNS).map((r) => r.id).join(",") || null;
  return null;
}

// A commit's cell of the compare column: GET /v1/compare of its newest runs against the
// baseline, read once per pair of sides and drawn when it comes.
function compareCell(base, runsOfCommit) {
  const td = el("td", { class: "compare muted" }, "–");
  if (!base) return td;
  const run = runsOfCommit.slice(-COMPARE_RUNS).map((r) => r.id).join(",");
  if (run === base) { td.textContent = "baseline"; return td; }
  const key = `${base}|${run}`;
  td.dataset.compare = key;
  const got = compared.get(key);
  if (got && got !== "pending") { drawCompare(td, got); return td; }
  td.textContent = "comparing…";
  if (!got) {
    compared.set(key, "pending");
    getJSON(`/v1/compare?${query({ base, run })}`).then(({ status, body }) => {
      compared.set(key, { status, body });
      document.querySelectorAll("#h-commits td.compare").forEach((cell) => {
        if (cell.dataset.compare === key) drawCompare(cell, compared.get(key));
      });
    }, () => compared.delete(key));
  }
  return td;
}

function drawCompare(td, { status, body }) {
  const row = status === 200 && body && Array.isArray(body.rows) ? body.rows[0] : null;
  if (!row) {
    const err = body && body.error;
    td.textContent = `GET /v1/compare: ${status}${err ? ` ${err.code}` : ""}`;
    td.className = "compare error";
    td.title = err ? err.message : "";
    return;
  }
  const iv = row.low != null && row.high != null ? ` [${fmt(row.low, 3)}–${fmt(row.high, 3)}]` : "";
  const warn = (body.warnings || []).filter((w) => w.field !== "problem");
  td.textContent = `×${fmt(row.ratio, 3)}${iv} ${row.verdict}${warn.length ? " ⚠" : ""}`;
  td.className = `compare ${row.significant ? (row.verdict === "slower" ? "slower" : "faster") : "muted"}`;
  td.dataset.verdict = row.verdict;
  td.title = [`${Math.round(body.confidence * 100)}% interval of the ratio of medians (GET /v1/compare)`,
              ...(body.warnings || []).map((w) => w.message)].join("\n");
}

// The detail's buttons: a run's series in the history view, with the run as its baseline.
function showSeriesOf(r, base) {
  if (!r) return;
  for (const k of HISTORY_FILTERS) $(`#h-${k}`).value = "";
  setView(Object.assign(Object.fromEntries(HISTORY_FILTERS.map((k) => [k, ""])), { series: seriesKeyOf(r), base: base || "" }));
  loadSeriesList();
  $("#trend").scrollIntoView({ block: "start" });
}

function useRunAsBaseline(r) {
  if (r) showSeriesOf(r, `run:${r.id}`);
}
