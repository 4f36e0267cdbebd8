// attnd dashboard: the study view (docs/dashboard.md), in the profiling study's own form:
// each variant's median over its rounds as a bar on a log axis with its p10–p90 and a dot
// per round, its kernels per forward, a stacked bar of its top kernels by GPU time, and
// the table (ratio to the baseline with its interval, host time, TFLOP/s, verify, agreement).
//
// A study is read with GET /v1/studies/ID (again every poll until it is final); the list of
// recent ones with GET /v1/studies. docs/api.md, Studies, has the record.
"use strict";

const STUDY_FINAL = new Set(["done", "failed", "cancelled"]);
let study = null;                // the record shown
let studyId = null;              // the id asked for (#study=ID)
let studyNote = "";              // why nothing is shown
let studyBusy = false;           // a read in flight
let studyListAt = 0;

function initStudy() {
  $("#s-pick").addEventListener("change", () => {
    const id = $("#s-pick").value;
    setView({ study: id });
    if (id) openStudy(Number(id)); else closeStudy();
  });
  loadStudyList();
}

async function loadStudyList() {
  studyListAt = Date.now();
  let resp;
  try { resp = await getJSON("/v1/studies?limit=20"); } catch (e) { return; }
  const sel = $("#s-pick");
  if (resp.status !== 200 || !resp.body || !Array.isArray(resp.body.studies)) {
    sel.replaceChildren(el("option", { value: "" }, resp.status === 404 ? "this server has no studies (GET /v1/studies: 404)"
                                                                         : `GET /v1/studies answered ${resp.status}`));
    sel.disabled = true;
    return;
  }
  sel.disabled = false;
  const opts = [el("option", { value: "" }, resp.body.studies.length ? "pick a study" : "no study yet: POST /v1/studies")];
  for (const s of resp.body.studies)
    opts.push(el("option", { value: String(s.id) }, `study ${s.id} · ${s.status} · ${(s.variants || []).join(", ")} · ` +
                 `${s.params ? shapeOf({ params: s.params }) : ""} · ${(s.created || "").slice(0, 16)}`));
  if (studyId != null && !resp.body.studies.some((s) => s.id === studyId))
    opts.push(el("option", { value: String(studyId) }, `study ${studyId}`));
  sel.replaceChildren(...opts);
  sel.value = studyId != null ? String(studyId) : "";
}

async function openStudy(id) {
  studyId = id;
  study = null;
  studyNote = `reading study ${id}…`;
  $("#study").dataset.study = id;
  if ($("#s-pick").value !== String(id)) loadStudyList();
  renderStudy();
  await readStudy();
  $("#study").scrollIntoView({ block: "start" });
}

function closeStudy() {
  studyId = null;
  study = null;
  studyNote = "";
  delete $("#study").dataset.study;
  renderStudy();
}

async function readStudy() {
  if (studyId == null || studyBusy) return;
  studyBusy = true;
  const id = studyId;
  try {
    const { status, body } = await getJSON(`/v1/studies/${id}`);
    if (id !== studyId) return;
    if (status === 200 && body && body.id === id) { study = body; studyNote = ""; }
    else {
      study = null;
      const err = body && body.error;
      studyNote = `no study ${id}: GET /v1/studies/${id} answered ${status}${err ? ` (${err.code}: ${err.message})` : ""}`;
    }
  } catch (e) {
    studyNote = "the server does not answer";
  } finally {
    studyBusy = false;
  }
  renderStudy();
}

// Each poll: a study still running is read again; the list now and then.
function pollStudy() {
  if (study && !STUDY_FINAL.has(study.status)) readStudy();
  if (Date.now() - studyListAt > 10000) loadStudyList();
}

const pct = (x) => x == null ? "–" : `${fmt(x * 100, 1)}%`;

function ratioText(row, baseline) {
  const v = row.vs_baseline;
  if (row.variant === baseline) return "baseline";
  if (!v || v.ratio == null) return "–";
  const iv = v.low != null && v.high != null ? ` [${fmt(v.low, 3)}–${fmt(v.high, 3)}]` : "";
  return `×${fmt(v.ratio, 3)}${iv}${v.significant ? "" : " (within noise)"}`;
}

function renderStudy() {
  const s = study, sec = $("#study");
  $("#s-status").textContent = s ? "" : studyNote || "pick a study, or open #study=ID";
  $("#s-status").className = studyNote && !s && studyNote.startsWith("no study") ? "error" : "muted";
  $("#s-body").hidden = !s;
  if (!s) return;
  sec.dataset.status = s.status;
  const prog = s.progress || {};
  $("#s-head").textContent = `study ${s.id} · ${s.status} · ${prog.done ?? "?"}/${prog.total ?? "?"} runs` +
    `${prog.failed ? ` (${prog.failed} failed)` : ""} · ${s.rounds} round${s.rounds === 1 ? "" : "s"} interleaved · baseline ` +
    `${s.baseline} · ${s.params ? shapeOf({ params: s.params }) : ""} · on ${s.node || "?"}` +
    `${s.build && s.build.commit ? ` · commit ${s.build.commit}` : ""}${s.error ? ` · ${s.error.code}: ${s.error.message}` : ""}`;
  $("#s-link").href = `#study=${s.id}`;
  const table = s.table || [];
  const label = (row) => row.variant + (row.impl_used && !String(row.variant).includes(":") ? ` (${row.impl_used})` : "");
  const roundsOf = (row) => (s.runs || []).filter((r) => r.variant === row.variant && r.median_us != null).map((r) => r.median_us);
  const flagOf = (row) => row.verify && row.verify.pass === false ? "vfail" : row.noise_missed ? "noisy" : "";
  logBars($("#s-timing"), table.map((row) => ({ key: row.variant, label: label(row), median: row.median_us,
    p10: row.p10_us, p90: row.p90_us, points: roundsOf(row), cls: flagOf(row),
    text: `${fmtNum(row.median_us)} µs · ${ratioText(row, s.baseline)}`,
    title: `${row.variant}: median ${fmt(row.median_us, 2)} µs over ${row.rounds_done} rounds (p10 ${fmt(row.p10_us, 2)}, ` +
           `p90 ${fmt(row.p90_us, 2)})${row.noise_missed ? `\n${row.noise_missed} runs missed their noise target` : ""}` })),
    { unit: "µs per forward", empty: s.status === "queued" ? "queued: no run yet" : "no variant has a time yet" });
  const why = (row) => row.device === "cpu" ? "cpu run: no GPU kernels" : (s.params && s.params.profile === false) ? "profile off"
    : "no kernel table";
  barChart($("#s-kernels"), table.map((row) => ({ key: row.variant, label: label(row), value: row.kernels_per_forward,
    text: row.kernels_per_forward == null ? `n/a (${why(row)})`
      : `${row.kernels_per_forward} kernels${row.memops_per_forward ? ` + ${row.memops_per_forward} memops` : ""}` })),
    { empty: "no variant yet" });
  stackedBars($("#s-top"), table.map((row) => ({ key: row.variant, label: label(row), note: `n/a (${why(row)})`,
    segments: (row.top_kernels || []).map((k) => ({ name: k.name, value: k.gpu_us || 0,
      title: `${k.name}\n${fmt(k.gpu_us, 2)} µs, ${k.calls} call${k.calls === 1 ? "" : "s"}, ${pct(k.share)} of its kernel table's summed GPU time` })) })),
    { unit: "µs GPU", empty: "no variant yet" });
  $("#s-table tbody").replaceChildren(...table.map((row) => {
    const v = row.verify;
    return el("tr", { "data-variant": row.variant, "data-verify": v ? (v.pass ? "pass" : "fail") : "" },
      el("td", {}, label(row)), el("td", { class: `status-${row.status}` }, row.status), el("td", {}, row.rounds_done ?? "–"),
      el("td", {}, fmt(row.median_us, 2)), el("td", {}, `${fmt(row.p10_us, 2)}–${fmt(row.p90_us, 2)}`),
      el("td", { class: row.vs_baseline && row.vs_baseline.significant ? "" : "muted" }, ratioText(row, s.baseline)),
      el("td", {}, fmt(row.host_us, 1)), el("td", {}, row.kernels_per_forward ?? "–"), el("td", {}, row.memops_per_forward ?? "–"),
      el("td", {}, fmt(row.tflops, 2)), el("td", {}, pct(row.fraction_of_peak)),
      el("td", { title: row.energy_why || "" }, row.joules_per_forward == null ? "–" : fmt(row.joules_per_forward, 4)),
      v ? el("td", { class: v.pass ? "verify-pass" : "verify-fail", title: `rel_l2_err ${v.rel_l2_err} against ${v.reference}` },
             v.pass ? "✓ pass" : "✗ FAIL") : el("td", { class: "muted" }, "–"),
      el("td", { class: "muted" }, (row.same_output_as || []).join(", ") || (row.deterministic === false ? "not deterministic" : "–")),
      el("td", { class: row.noise_missed ? "noisy" : "muted" }, row.noise_missed ? `⚠ ${row.noise_missed}` : "–"),
      el("td", { class: "error" }, row.error ? `${row.error.code}: ${row.error.message}` : ""));
  }));
}
