#!/usr/bin/env python3
"""attnd's side of the benchmark, and the side-by-side report.

    compare.py attnd  --url URL [--shapes bench/shapes.json] [--variants flash,cudnn] --out attnd.jsonl
        runs every shape × every GPU variant attnd has (GET /v1/variants: available, device
        cuda), or only those --variants names, with the default stopping rule and profile
        on; one JSON line per run.

    compare.py report --attnd attnd.jsonl --torch torch.jsonl [--shapes …] [--url URL]
                      [--results-dir bench/results] [--out-dir DIR] [--cudnn-choice torch|system]
                      [--variants naive,cudnn]
        prints a markdown table per shape and writes
        RESULTS_DIR/<card>/YYYY-MM-DD-<commit>-bench.md and .json (bench/README.md, "Reports";
        the same two files into --out-dir).
        The header names the cuDNN each side ran: attnd's from its cudnn run records (the
        worker's `library`), else GET /v1/variants; PyTorch's torch.backends.cudnn.version().

Ratios are attnd / torch: below 1, attnd is faster (or leaner). Standard library only, so it
runs on a bare GPU machine.
"""
import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def http_json(url, method="GET", timeout=600):
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        body = e.read().decode(errors="replace")
        try:
            return e.code, json.loads(body)
        except ValueError:
            return e.code, {"error": {"code": "not_json", "message": body[:500]}}


def read_jsonl(path):
    rows = []
    if not path or not os.path.exists(path):
        return rows
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
    return rows


def shape_key(x):
    return (x["batch"], x["heads"], x["seq"], x["head_dim"], x["mask"])


def shape_title(k):
    return "B=%d H=%d S=%d D=%d %s" % k


# ---------------------------------------------------------------------------- attnd side

def cmd_attnd(args):
    with open(args.shapes) as f:
        cfg = json.load(f)
    url = args.url.rstrip("/")
    st, vs = http_json(url + "/v1/variants")
    if st != 200:
        sys.exit("GET /v1/variants answered %d: %s" % (st, vs))
    have = {v["name"]: v for v in vs["variants"] if v.get("device") == "cuda"}
    order = [n for n in cfg["variants"] if n in have] + sorted(n for n in have if n not in cfg["variants"])
    wanted = [x.strip() for x in (args.variants or "").split(",") if x.strip()]
    if wanted:
        for n in wanted:
            if n not in have:
                print("attnd: no GPU variant named %s (it has: %s)" % (n, ", ".join(sorted(have))), file=sys.stderr)
        order = [n for n in order if n in wanted]
    lib = (have.get("cudnn") or {}).get("library") or {}
    if "cudnn" in order and lib:
        print("attnd: cudnn variant uses cuDNN %s from %s (requested: %s)"
              % (lib.get("version"), lib.get("path"), lib.get("requested")), file=sys.stderr)
    out = open(args.out, "w")
    for name in order:
        if not have[name].get("available"):
            print("attnd: %s not available: %s" % (name, have[name].get("why")), file=sys.stderr)
    for shape in cfg["shapes"]:
        for name in order:
            if not have[name].get("available"):
                continue
            # min_time_ms: a timed window long enough for NVML's energy counter to step a few
            # times (energy.why says so when it did not).
            # max_iters: a 60 us kernel would otherwise stop at the default 1000 forwards, 60 ms.
            params = dict(backend=name, device=args.device, dtype=cfg.get("dtype", "bf16"),
                          min_time_ms=args.min_time_ms, max_iters=100000, **shape)
            status, body = http_json(url + "/v1/runs?" + urllib.parse.urlencode(params), method="POST")
            row = dict(shape, variant=name, http_status=status, record=body)
            out.write(json.dumps(row) + "\n")
            out.flush()
            t = body.get("timing") or {}
            print("attnd %-14s %-40s %s %s" % (name, shape_title(shape_key(shape)), status,
                                              "%.1f us" % t["median_us"] if "median_us" in t else
                                              json.dumps(body.get("error"))[:200]), file=sys.stderr)
    out.close()


# ---------------------------------------------------------------------------- report

def fmt(x, nd=1):
    if x is None:
        return "—"
    if isinstance(x, str):
        return x
    if abs(x) >= 100:
        return "%.0f" % x
    return ("%." + str(nd) + "f") % x


def ratio(a, b):
    if a is None or b is None or b == 0:
        return None
    return a / b


def energy_note(why, limit=60):
    """energy.why in a few words for the note column: the counter's steps and the window, the
    power against the board's limit (the worker's phrasings, old and new), else its first
    clause, cut at a word."""
    m = re.search(r"stepped (\d+) time\(s\) .*only (\d+) of the steps were timed", why)
    if m:
        return "sampler held off the CPU: %s of %s counter steps timed" % (m.group(2), m.group(1))
    m = re.search(r"stepped (\d+) time\(s\) (?:over [\d.]+ ms of|in) the ([\d.]+) ms", why)
    if m:
        steps = int(m.group(1))
        return "%d counter step%s in %.0f ms" % (steps, "" if steps == 1 else "s", float(m.group(2)))
    m = re.search(r"gives ([\d.]+) W .*power limit of ([\d.]+) W", why)
    if m:
        return "%s W over the %s W limit" % (m.group(1), m.group(2))
    text = re.split(r"; |: ", re.sub(r"\s*\([^)]*\)", "", why))[0]
    if len(text) > limit:
        text = text[:limit].rsplit(" ", 1)[0] + "…"
    return text


def commit_id(build_info=None):
    # ATTND_COMMIT first, then the commit the server was built from: a copy of the tree on a
    # lent machine may carry a stale .git
    if os.environ.get("ATTND_COMMIT"):
        return os.environ["ATTND_COMMIT"]
    if build_info and build_info.get("commit") and build_info.get("commit") != "unknown":
        return build_info["commit"][:7] + ("-dirty" if build_info.get("dirty") else "")
    try:
        p = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                           timeout=10)
        if p.returncode == 0 and p.stdout.strip():
            return p.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return "nocommit"


def slug(s):
    return re.sub(r"[^a-z0-9]+", "-", (s or "unknown-gpu").lower()).strip("-")


def attnd_view(row):
    """The numbers of one attnd run, or None when it did not run."""
    rec = row.get("record") or {}
    if row.get("http_status") != 200 or rec.get("status") != "done":
        err = rec.get("error") or {}
        return {"error": "%s %s" % (row.get("http_status"), err.get("code", ""))}
    t, k, p, en = rec["timing"], rec.get("kernels") or {}, rec.get("perf") or {}, rec.get("energy") or {}
    ops = None
    if k.get("per_forward") is not None:
        ops = "%d+%d" % (k["per_forward"], k.get("memops_per_forward", 0))
    return {"gpu_us": t.get("median_us"), "host_us": t.get("host_us"), "ops": ops,
            "ops_n": (k.get("per_forward") or 0) + (k.get("memops_per_forward") or 0) if ops else None,
            "tflops": p.get("tflops"), "iters": t.get("iters"), "stop": t.get("stop_reason"),
            "throttled": (t.get("clocks") or {}).get("throttled"), "id": rec.get("id"),
            "peak_fraction": (p.get("fraction_of_peak") or {}).get("compute"), "suspect": p.get("suspect"),
            "tflop_per_joule": en.get("tflop_per_joule"), "avg_power_w": en.get("avg_power_w"),
            "joules_per_forward": en.get("joules_per_forward"), "energy_why": en.get("why"),
            "clock_reasons": (t.get("clocks") or {}).get("event_reasons")}


def attnd_cudnn_library(attnd_rows, url):
    """{"name", "requested", "version", "path", "source"} of the cuDNN attnd's cudnn variant
    ran on: the worker's own report in a cudnn run record, else what GET /v1/variants says
    (the front's load, same settings); None when neither is known."""
    for r in attnd_rows:
        lib = (r.get("record") or {}).get("library")
        if r.get("variant") == "cudnn" and isinstance(lib, dict) and lib.get("version"):
            return dict(lib, source="run record %s" % (r.get("record") or {}).get("id"))
    if url:
        try:
            st, vs = http_json(url.rstrip("/") + "/v1/variants", timeout=10)
            row = next((v for v in vs.get("variants", []) if v.get("name") == "cudnn"), None) if st == 200 else None
            if row and isinstance(row.get("library"), dict):
                lib = dict(row["library"], source="GET /v1/variants")
                if not row.get("available"):
                    lib["why"] = row.get("why")
                return lib
        except (OSError, ValueError):
            pass
    return None


def cudnn_text(v):
    """91900 (torch.backends.cudnn.version()) or "9.19.0" → "9.19.0"; "91900, recorded" →
    "9.19.0, recorded"; None → "?"."""
    if v is None:
        return "?"
    head, sep, tail = str(v).partition(", ")
    if head.isdigit():
        n = int(head)
        return "%d.%d.%d" % (n // 10000, (n % 10000) // 100, n % 100) + sep + tail
    return str(v)


def cudnn_lines(doc):
    """The report's statement of which cuDNN each side ran."""
    lib = doc.get("attnd_cudnn") or {}
    tm = dict(doc.get("torch") or {})
    out = []
    if tm.get("cudnn") is None and doc.get("recorded_peer_cudnn"):
        tm["cudnn"] = "%s, recorded" % doc["recorded_peer_cudnn"]  # PyTorch did not run here
    if lib.get("version"):
        out.append("cuDNN: attnd's `cudnn` variant ran cuDNN %s from `%s` (requested `%s`%s; %s); PyTorch "
                   "reports cuDNN %s (`torch.backends.cudnn.version()` = %s)."
                   % (lib["version"], lib.get("path"), lib.get("requested"),
                      ", BENCH_CUDNN=%s" % doc["cudnn_choice"] if doc.get("cudnn_choice") else "", lib.get("source"),
                      cudnn_text(tm.get("cudnn")), tm.get("cudnn", "?")))
        if (doc.get("torch") or {}).get("cudnn") is not None and cudnn_text(doc["torch"]["cudnn"]) != lib["version"]:
            out.append("")
            out.append("**The two sides ran different cuDNN releases**: the `cudnn` rows compare libraries, "
                       "not only implementations (bench/README.md: BENCH_CUDNN).")
    elif lib:
        out.append("cuDNN: attnd could not load the requested cuDNN (`%s`): %s. PyTorch reports cuDNN %s."
                   % (lib.get("requested"), lib.get("why") or "not loaded", cudnn_text(tm.get("cudnn"))))
    else:
        out.append("cuDNN: attnd's cuDNN is unknown (no cudnn run, no server to ask). PyTorch reports cuDNN %s."
                   % cudnn_text(tm.get("cudnn")))
    return out


def build(args):
    with open(args.shapes) as f:
        cfg = json.load(f)
    attnd_rows = read_jsonl(args.attnd)
    torch_rows = read_jsonl(args.torch)
    recorded = {}
    for r in cfg.get("recorded_peer", {}).get("rows", []):
        recorded[(shape_key(r), r["variant"])] = r
    live_torch = {(shape_key(r), r["variant"]): r for r in torch_rows}
    attnd = {(shape_key(r), r["variant"]): attnd_view(r) for r in attnd_rows}

    gpu = None
    for r in attnd_rows:
        dev = (r.get("record") or {}).get("device") or {}
        if dev.get("name"):
            gpu = dev["name"]
            break
    if gpu is None and args.url:
        try:
            st, d = http_json(args.url.rstrip("/") + "/v1/device", timeout=10)
            gpu = next((x.get("name") for x in d.get("devices", []) if x.get("id", "").startswith("cuda")), None)
        except (OSError, ValueError):
            gpu = None
    if gpu is None:
        gpu = next((r.get("gpu") for r in torch_rows if r.get("gpu")), None)
    torch_meta = next((r for r in torch_rows if r.get("torch")), None)
    build_info = next(((r.get("record") or {}).get("build") for r in attnd_rows
                       if (r.get("record") or {}).get("build")), None)
    attnd_cudnn = attnd_cudnn_library(attnd_rows, args.url)

    variants = list(cfg["variants"])
    for (_, v) in attnd:
        if v not in variants:
            variants.append(v)
    shown = [x.strip() for x in (args.variants or "").split(",") if x.strip()]
    if shown:
        variants = [v for v in variants if v in shown]
    tables = []
    for shape in cfg["shapes"]:
        sk = shape_key(shape)
        lines = []
        for v in variants:
            a = attnd.get((sk, v))
            t = live_torch.get((sk, v))
            src = "live"
            if t is None or t.get("error"):
                if t is not None and t.get("error"):
                    src = "error: " + t["error"][:80]
                rec = recorded.get((sk, v))
                if rec is not None:
                    t, src = dict(rec, ops=rec["ops"]), "rec" if src == "live" else src + "; rec"
                else:
                    t = None
            if a is None and t is None:
                continue
            lines.append({"variant": v, "attnd": a, "torch": t, "torch_source": src})
        tables.append({"shape": shape, "rows": lines})
    return {"date": datetime.date.today().isoformat(), "gpu": gpu, "commit": commit_id(build_info), "build": build_info,
            "torch": torch_meta and {k: torch_meta.get(k) for k in ("torch", "cuda", "cudnn", "gpu")},
            "attnd_cudnn": attnd_cudnn, "cudnn_choice": args.cudnn_choice,
            "recorded_peer_cudnn": cfg.get("recorded_peer", {}).get("cudnn"),
            "tables": tables, "raw": {"attnd": attnd_rows, "torch": torch_rows}}


def markdown(doc, prediction_text):
    out = []
    out.append("# attnd vs PyTorch — %s, %s, commit %s" % (doc["date"], doc["gpu"] or "unknown GPU", doc["commit"]))
    out.append("")
    tm = doc.get("torch") or {}
    out.append("PyTorch %s (CUDA %s, cuDNN %s) on the same GPU in the same run, same shapes, bf16, "
               "[B,H,S,D]. Method: bench/README.md. Ratios are attnd / torch (below 1: attnd faster or "
               "leaner). `rec`: PyTorch could not run here; its numbers recorded 2026-12-02 on an H200 "
               "(peers-h200.md) stand in." % (tm.get("torch", "?"), tm.get("cuda", "?"), tm.get("cudnn", "?")))
    out.append("")
    out.extend(cudnn_lines(doc))
    out.append("")
    b = doc.get("build") or {}
    out.append("attnd build: %s" % ("version %s, commit %s%s, %s, nvcc %s (CUDA %s), for %s, built %s" % (
        b.get("version"), b.get("commit"), " (dirty)" if b.get("dirty") else "", b.get("compiler"), b.get("nvcc"),
        b.get("cuda_toolkit"), b.get("gencode"), b.get("built")) if b else "not reported by the server"))
    out.append("")
    out.append("## Prediction before measuring")
    out.append("")
    out.append(prediction_text.strip() if prediction_text else
               "_(placeholder: what was expected — ratios per variant and why — written before "
               "running bench/run.sh, pasted here unchanged.)_")
    out.append("")
    out.append("## Results")
    for tb in doc["tables"]:
        s = tb["shape"]
        out.append("")
        out.append("### B=%d H=%d S=%d D=%d, %s" % (s["batch"], s["heads"], s["seq"], s["head_dim"], s["mask"]))
        out.append("")
        out.append("| variant | attnd gpu us | torch gpu us | gpu ratio | attnd host us | torch host us | host ratio "
                   "| attnd kernels+memops | torch ops | attnd TFLOP/s | torch TFLOP/s | attnd of peak "
                   "| attnd TFLOP/J | attnd W | note |")
        out.append("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in tb["rows"]:
            a, t = r["attnd"] or {}, r["torch"] or {}
            note = []
            if a.get("error"):
                note.append("attnd " + a["error"])
            elif r["attnd"] is None:
                note.append("not in attnd")
            if a.get("throttled"):
                note.append("throttled")
            if a.get("stop"):
                note.append("%s/%s it" % (a["stop"], a.get("iters")))
            if a.get("suspect"):
                note.append("SUSPECT: above the peak")
            if a.get("clock_reasons"):
                note.append("clocks: " + ",".join(x for x in a["clock_reasons"] if x != "gpu_idle"))
            if a.get("energy_why") and not a.get("error"):
                note.append("no energy: " + energy_note(a["energy_why"]))
            if r["torch_source"] != "live":
                note.append("torch " + r["torch_source"])
            out.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                r["variant"], fmt(a.get("gpu_us")), fmt(t.get("gpu_us")), fmt(ratio(a.get("gpu_us"), t.get("gpu_us")), 2),
                fmt(a.get("host_us")), fmt(t.get("host_us")), fmt(ratio(a.get("host_us"), t.get("host_us")), 2),
                a.get("ops") or "—", fmt(t.get("ops"), 0) if t.get("ops") is not None else "—",
                fmt(a.get("tflops")), fmt(t.get("tflops")), fmt(a.get("peak_fraction"), 2),
                fmt(a.get("tflop_per_joule"), 2), fmt(a.get("avg_power_w"), 0), "; ".join(note)))
    out.append("")
    out.append("Raw records: the .json file beside this one.")
    return "\n".join(out) + "\n"


def cmd_report(args):
    doc = build(args)
    prediction = None
    pf = args.prediction or os.environ.get("PREDICTION_FILE")
    if pf and os.path.exists(pf):
        with open(pf) as f:
            prediction = f.read()
    md = markdown(doc, prediction)
    sys.stdout.write(md)
    base = "%s-%s-bench" % (doc["date"], doc["commit"])
    card_dir = os.path.join(args.results_dir, slug(doc["gpu"])) if args.results_dir else None
    for d in [card_dir] + ([args.out_dir] if args.out_dir else []):
        if not d:
            continue
        try:
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, base + ".md"), "w") as f:
                f.write(md)
            with open(os.path.join(d, base + ".json"), "w") as f:
                json.dump(doc, f, indent=1)
            print("wrote %s" % os.path.join(d, base + ".md"), file=sys.stderr)
        except OSError as exc:
            print("cannot write results into %s: %s" % (d, exc), file=sys.stderr)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("attnd")
    a.add_argument("--url", required=True)
    a.add_argument("--shapes", default=os.path.join(REPO, "bench", "shapes.json"))
    a.add_argument("--device", default="cuda:0")
    a.add_argument("--variants", default="", help="comma-separated attnd variants; default: every available one")
    a.add_argument("--out", required=True)
    a.add_argument("--min-time-ms", type=float, default=500.0,
                   help="each run's min_time_ms: energy needs 200 ms between two steps of NVML's counter, "
                        "which steps every ~100 ms (default 500)")
    r = sub.add_parser("report")
    r.add_argument("--attnd", required=True)
    r.add_argument("--torch", default=None)
    r.add_argument("--shapes", default=os.path.join(REPO, "bench", "shapes.json"))
    r.add_argument("--url", default=None)
    r.add_argument("--results-dir", default=os.path.join(REPO, "bench", "results"))
    r.add_argument("--out-dir", default=None)
    r.add_argument("--prediction", default=None, help="a file with the prediction written before measuring")
    r.add_argument("--cudnn-choice", default=None, help="what bench/run.sh chose for attnd (torch|system), stated")
    r.add_argument("--variants", default="", help="comma-separated: only these rows; default: every variant")
    args = ap.parse_args()
    cmd_attnd(args) if args.cmd == "attnd" else cmd_report(args)


if __name__ == "__main__":
    main()
