// attnd dashboard: the SVG charts (docs/dashboard.md). Plain browser JavaScript, no libraries.
//
// Times are drawn on a LOG axis: equal ratios are equal distances, so 60 and 62 µs stay
// apart (3% of a decade's width at any scale) where a linear axis from 0 would merge them.
// Every chart marks what it draws with data- attributes (data-run, data-variant, …) so that
// the page's tests can find each mark.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";

function svgEl(tag, attrs, text) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v != null) e.setAttribute(k, v);
  if (text != null) e.textContent = text;
  return e;
}

function withTitle(node, text) {
  node.append(svgEl("title", {}, text));
  return node;
}

// A number as a short axis or value label: 3 significant digits, thousands as k.
function fmtNum(v) {
  if (v == null || !isFinite(v)) return "–";
  const a = Math.abs(v);
  if (a >= 1e4) return `${+(v / 1e3).toPrecision(3)}k`;
  if (a >= 100) return String(Math.round(v));
  return String(+v.toPrecision(3));
}

// The log domain of values: at least a factor `minRatio` wide around their geometric
// centre, padded by 6% of its log width on each side.
function logDomain(values, minRatio = 1.1) {
  const vals = values.filter((v) => v != null && isFinite(v) && v > 0);
  if (!vals.length) return [1, 10];
  let lo = Math.log(Math.min(...vals)), hi = Math.log(Math.max(...vals));
  const want = Math.log(minRatio);
  if (hi - lo < want) { const mid = (lo + hi) / 2; lo = mid - want / 2; hi = mid + want / 2; }
  const pad = (hi - lo) * 0.06;
  return [Math.exp(lo - pad), Math.exp(hi + pad)];
}

// A log scale: value -> pixel between p0 and p1 (p1 < p0 for a y axis).
function logScale([d0, d1], p0, p1) {
  const l0 = Math.log(d0), l1 = Math.log(d1);
  const f = (v) => p0 + (Math.log(v) - l0) / (l1 - l0) * (p1 - p0);
  f.domain = [d0, d1];
  return f;
}

// Tick values for a log domain: 1-2-5 per decade over a wide one, more mantissas over a
// narrower one, and evenly spaced round numbers when it spans less than a factor 3.
function logTicks([d0, d1]) {
  const ratio = d1 / d0;
  if (ratio < 3) {
    const raw = (d1 - d0) / 5, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
    const out = [];
    for (let v = Math.ceil(d0 / step) * step; v <= d1; v += step) out.push(+v.toPrecision(12));
    return out;
  }
  const mant = ratio > 30 ? [1, 2, 5] : [1, 1.5, 2, 3, 5, 7];
  const out = [];
  for (let e = Math.floor(Math.log10(d0)); e <= Math.ceil(Math.log10(d1)); e++)
    for (const m of mant) { const v = m * Math.pow(10, e); if (v >= d0 && v <= d1) out.push(+v.toPrecision(12)); }
  return out;
}

const medianOf = (xs) => {
  const s = xs.filter((x) => x != null && isFinite(x)).sort((a, b) => a - b);
  if (!s.length) return null;
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

// The x axis of a horizontal log chart: grid lines and labels along the bottom.
function xAxis(scale, top, bottom, unit) {
  const g = svgEl("g", { class: "axis", "data-scale": "log" });
  for (const t of logTicks(scale.domain)) {
    const x = scale(t);
    g.append(svgEl("line", { class: "grid", x1: x, x2: x, y1: top, y2: bottom }),
             svgEl("text", { class: "tick", x, y: bottom + 13, "text-anchor": "middle" }, fmtNum(t)));
  }
  g.append(svgEl("text", { class: "unit", x: scale(scale.domain[1]), y: bottom + 26, "text-anchor": "end" },
                 `${unit} (log scale)`));
  return g;
}

function emptyChart(svg, text) {
  svg.setAttribute("height", 60);
  svg.replaceChildren(svgEl("text", { x: 10, y: 30, class: "empty" }, text));
}

const labelWidth = (labels) => Math.min(300, Math.max(90, 12 + 6.4 * Math.max(0, ...labels.map((l) => l.length))));

// Every run of each row as a dot at its median with its p10–p90 as an error bar, and the
// row's median of medians as a tall tick with its value.
//   rows: [{key, label, title, runs: [{id, median, p10, p90, cls, title}]}]
//   opts: {unit, onPick(runId), empty}
function dotPlot(svg, rows, opts) {
  const live = rows.filter((r) => r.runs.length);
  if (!live.length) return emptyChart(svg, opts.empty);
  const W = Number(svg.getAttribute("width")), left = labelWidth(live.map((r) => r.label)), right = 120;
  const rowH = 30, top = 8, bottom = top + live.length * rowH;
  const all = live.flatMap((r) => r.runs.flatMap((x) => [x.median, x.p10, x.p90]));
  const x = logScale(logDomain(all), left, W - right);
  svg.setAttribute("height", bottom + 32);
  const kids = [xAxis(x, top, bottom, opts.unit)];
  live.forEach((row, i) => {
    const y0 = top + i * rowH, mid = y0 + rowH / 2;
    const g = svgEl("g", { class: "row", "data-key": row.key });
    g.append(svgEl("title", {}, row.title || row.label), svgEl("text", { class: "label", x: 4, y: mid + 4 }, row.label));
    // The median of the row's medians first, under the dots: it must not hide one.
    const med = medianOf(row.runs.map((r) => r.median));
    g.append(svgEl("line", { class: "median", x1: x(med), x2: x(med), y1: y0 + 3, y2: y0 + rowH - 3,
                             "data-median": med }),
             svgEl("text", { class: "value", x: W - right + 6, y: mid + 4 },
                   `${fmtNum(med)} ${opts.unit}${row.runs.length > 1 ? ` · ${row.runs.length} runs` : ""}`));
    row.runs.forEach((r, j) => {
      const y = mid + ((j * 7) % 13) - 6;          // spread the dots over the row so that none hides another
      if (r.p10 != null && r.p90 != null && r.p90 > 0 && r.p10 > 0) {
        g.append(svgEl("line", { class: "err", x1: x(r.p10), x2: x(r.p90), y1: y, y2: y, "data-run": r.id }),
                 svgEl("line", { class: "err", x1: x(r.p10), x2: x(r.p10), y1: y - 2, y2: y + 2 }),
                 svgEl("line", { class: "err", x1: x(r.p90), x2: x(r.p90), y1: y - 2, y2: y + 2 }));
      }
      const dot = withTitle(svgEl("circle", { class: `run ${r.cls || ""}`.trim(), cx: x(r.median).toFixed(2), cy: y,
                                               r: 3.5, "data-run": r.id, "data-median": r.median }), r.title);
      dot.addEventListener("click", () => opts.onPick && opts.onPick(r.id));
      g.append(dot);
    });
    kids.push(g);
  });
  svg.replaceChildren(...kids);
}

// Plain horizontal bars on a linear axis from 0 (counts: kernels per forward).
//   data: [{key, label, value, run, text, title}]
function barChart(svg, data, opts) {
  if (!data.length) return emptyChart(svg, opts.empty);
  const W = Number(svg.getAttribute("width")), rowH = 24, left = labelWidth(data.map((d) => d.label)), right = 150;
  svg.setAttribute("height", Math.max(60, 20 + data.length * rowH));
  const max = Math.max(1e-12, ...data.map((d) => d.value || 0));
  svg.replaceChildren(...data.map((d, i) => {
    const y = 10 + i * rowH, w = d.value == null ? 0 : Math.max(1, (W - left - right) * d.value / max);
    const g = svgEl("g", { "data-key": d.key, "data-run": d.run });
    g.append(svgEl("text", { x: 4, y: y + 15 }, d.label));
    const bar = withTitle(svgEl("rect", { class: "bar", x: left, y: y + 3, width: w, height: rowH - 8,
                                          "data-run": d.run, "data-key": d.key }), d.title || d.text);
    if (opts.onPick && d.run != null) bar.addEventListener("click", () => opts.onPick(d.run));
    g.append(bar, svgEl("text", { x: left + w + 4, y: y + 15, class: "value" }, d.text));
    return g;
  }));
}

// Bars on a log axis (the study's medians) with their p10–p90 as error bars and a dot per
// round. rows: [{key, label, median, p10, p90, points: [values], text, cls, title}]
function logBars(svg, rows, opts) {
  const live = rows.filter((r) => r.median != null);
  if (!live.length) return emptyChart(svg, opts.empty);
  const W = Number(svg.getAttribute("width")), left = labelWidth(live.map((r) => r.label)), right = 210;
  const rowH = 30, top = 8, bottom = top + live.length * rowH;
  const x = logScale(logDomain(live.flatMap((r) => [r.median, r.p10, r.p90, ...(r.points || [])]), 1.5), left, W - right);
  svg.setAttribute("height", bottom + 32);
  const kids = [xAxis(x, top, bottom, opts.unit)];
  live.forEach((row, i) => {
    const y0 = top + i * rowH, mid = y0 + rowH / 2;
    const g = svgEl("g", { class: "row", "data-key": row.key });
    g.append(svgEl("title", {}, row.title || row.label), svgEl("text", { class: "label", x: 4, y: mid + 4 }, row.label));
    g.append(withTitle(svgEl("rect", { class: `bar ${row.cls || ""}`.trim(), x: left, y: y0 + 5,
                                       width: Math.max(1, x(row.median) - left), height: rowH - 10,
                                       "data-key": row.key, "data-median": row.median }), row.title || row.text));
    if (row.p10 != null && row.p90 != null) {
      g.append(svgEl("line", { class: "err", x1: x(row.p10), x2: x(row.p90), y1: mid, y2: mid, "data-key": row.key }),
               svgEl("line", { class: "err", x1: x(row.p10), x2: x(row.p10), y1: mid - 5, y2: mid + 5 }),
               svgEl("line", { class: "err", x1: x(row.p90), x2: x(row.p90), y1: mid - 5, y2: mid + 5 }));
    }
    for (const v of row.points || [])
      if (v != null && v > 0) g.append(svgEl("circle", { class: "round", cx: x(v), cy: mid, r: 2.5 }));
    g.append(svgEl("text", { class: "value", x: W - right + 6, y: mid + 4 }, row.text));
    kids.push(g);
  });
  svg.replaceChildren(...kids);
}

// One stacked bar per row, a segment per named part (a variant's top kernels by GPU µs per
// forward), the same name in the same colour in every row; a legend under the bars.
//   rows: [{key, label, segments: [{name, value, title}], note}]
const SEGMENT_COLOURS = 8;
function stackedBars(svg, rows, opts) {
  if (!rows.length) return emptyChart(svg, opts.empty);
  const W = Number(svg.getAttribute("width")), left = labelWidth(rows.map((r) => r.label)), right = 90, rowH = 26;
  const names = [...new Set(rows.flatMap((r) => r.segments.map((s) => s.name)))];
  const colour = (name) => `seg c${names.indexOf(name) % SEGMENT_COLOURS}`;
  const max = Math.max(1e-12, ...rows.map((r) => r.segments.reduce((a, s) => a + s.value, 0)));
  const legendTop = 14 + rows.length * rowH;
  svg.setAttribute("height", legendTop + 10 + Math.min(names.length, 8) * 15);
  const kids = [];
  rows.forEach((row, i) => {
    const y = 8 + i * rowH, g = svgEl("g", { class: "row", "data-key": row.key });
    g.append(svgEl("text", { class: "label", x: 4, y: y + 15 }, row.label));
    let at = left, total = 0;
    for (const s of row.segments) {
      const w = (W - left - right) * s.value / max;
      g.append(withTitle(svgEl("rect", { class: colour(s.name), x: at, y: y + 3, width: Math.max(0.5, w), height: rowH - 8,
                                         "data-key": row.key, "data-kernel": s.name }), s.title || s.name));
      at += w;
      total += s.value;
    }
    g.append(svgEl("text", { class: "value", x: at + 4, y: y + 15 },
                   row.segments.length ? `${fmtNum(total)} ${opts.unit}` : row.note || "no kernel table"));
    kids.push(g);
  });
  names.slice(0, 8).forEach((name, i) => {
    const y = legendTop + i * 15;
    kids.push(svgEl("rect", { class: colour(name), x: left, y, width: 10, height: 10 }),
              withTitle(svgEl("text", { class: "legend", x: left + 14, y: y + 9 },
                              name.length > 90 ? name.slice(0, 88) + "…" : name), name));
  });
  if (names.length > 8) kids.push(svgEl("text", { class: "legend", x: left, y: legendTop + 8 * 15 + 9 },
                                        `… ${names.length - 8} more kernels`));
  svg.replaceChildren(...kids);
}

// A series over time: one point per run, oldest left, evenly spaced; y on a log axis
// (µs, or the ratio to a baseline); the runs of each commit on a band of their own, labelled.
//   points: [{id, value, low, high, commit, created, cls, title}]
//   opts: {unit, ref (a y value drawn as a dashed line), onPick}
function trendChart(svg, points, opts) {
  if (!points.length) return emptyChart(svg, opts.empty);
  const W = Number(svg.getAttribute("width")), left = 56, right = 16, top = 22, H = 240, bottom = top + H;
  svg.setAttribute("height", bottom + 40);
  const vals = points.flatMap((p) => [p.value, p.low, p.high]).concat(opts.ref != null ? [opts.ref] : []);
  const y = logScale(logDomain(vals), bottom, top);
  const step = (W - left - right) / Math.max(1, points.length);
  const xAt = (i) => left + step * (i + 0.5);
  const kids = [];
  // Commit bands: consecutive runs of one build.
  let start = 0;
  points.forEach((p, i) => {
    if (i + 1 < points.length && points[i + 1].commit === p.commit) return;
    const band = svgEl("g", { class: "commit", "data-commit": p.commit || "" });
    const x0 = left + step * start, w = step * (i + 1 - start);
    band.append(svgEl("rect", { class: `band b${kids.length % 2}`, x: x0, y: top, width: w, height: H }));
    if (w > 40) band.append(svgEl("text", { class: "commit-label", x: x0 + 3, y: top - 6 },
                                  (p.commit || "?").slice(0, w > 80 ? 12 : 7)));
    kids.push(band);
    start = i + 1;
  });
  const axis = svgEl("g", { class: "axis", "data-scale": "log" });
  for (const t of logTicks(y.domain))
    axis.append(svgEl("line", { class: "grid", x1: left, x2: W - right, y1: y(t), y2: y(t) }),
                svgEl("text", { class: "tick", x: left - 4, y: y(t) + 4, "text-anchor": "end" }, fmtNum(t)));
  axis.append(svgEl("text", { class: "unit", x: left, y: bottom + 28 }, `${opts.unit} (log scale)`));
  const when = (p) => (p.created || "").replace("T", " ").slice(0, 16);
  axis.append(svgEl("text", { class: "tick", x: left, y: bottom + 14 }, when(points[0])),
              svgEl("text", { class: "tick", x: W - right, y: bottom + 14, "text-anchor": "end" }, when(points[points.length - 1])));
  kids.push(axis);
  if (opts.ref != null) kids.push(svgEl("line", { class: "ref", x1: left, x2: W - right, y1: y(opts.ref), y2: y(opts.ref) }));
  points.forEach((p, i) => {
    const g = svgEl("g", { class: "point", "data-run": p.id });
    if (p.low != null && p.high != null && p.low > 0)
      g.append(svgEl("line", { class: "err", x1: xAt(i), x2: xAt(i), y1: y(p.low), y2: y(p.high) }));
    const dot = withTitle(svgEl("circle", { class: `run ${p.cls || ""}`.trim(), cx: xAt(i), cy: y(p.value).toFixed(2), r: 3.5,
                                            "data-run": p.id, "data-value": p.value }), p.title);
    dot.addEventListener("click", () => opts.onPick && opts.onPick(p.id));
    g.append(dot);
    kids.push(g);
  });
  svg.replaceChildren(...kids);
}
