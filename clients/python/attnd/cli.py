"""attnd-cli: run, sweep and inspect attnd from a shell.

    attnd-cli run --backend flash --seq 4096 [--json]
    attnd-cli sweep --backends naive,math --seq 512,1024 --heads 8,16 [--csv out.csv] [--json out.json]
    attnd-cli sweep --plan plan.json                     (the same grid, from a plan file: docs/plan.md)
    attnd-cli plan --backends naive,math --seq 512,1024 [run flags] > plan.json
    attnd-cli run --backend cudnn --model llama-3.1-70b --seq 8192   (a model preset: attnd-cli models)
    attnd-cli device | variants | models | get ID | wait ID | cancel ID…
    attnd-cli tensors list | upload FILE [--name N --device cpu] | download ID --out FILE | delete ID…
    attnd-cli runs [--order newest] [--limit N] [--backend flash --seq 4096 --tag exp1 …] [--json | --csv]
    attnd-cli runs --follow [--limit N]                  (new runs, and each again until it is final)
    attnd-cli runs --group-by backend,seq_q [filters]    (count, median of medians, min, max per group)
    attnd-cli study --variants flash:tma,cudnn --seq 8192 --head-dim 128 [--rounds 3] [--json]
    attnd-cli compare 17 18 | 17,18,19 20,21,22 | study:3 study:4   (ratio, interval, verdict, warnings)

--url (default $ATTND_URL, else http://127.0.0.1:8080), --token (default $ATTND_TOKEN).
Tables show `verify` (pass, FAIL) when runs verified, and `noise` (missed:STOP_REASON) on a run
whose timing.rse ended above its target_noise: its median is noisier than asked for.
Exit status: 0 all went well (a reader that closed the pipe early, as `| head` does,
included); 1 a run failed, was refused or failed its verify; 2 bad usage.
"""
import argparse
import csv
import itertools
import json
import os
import re
import sys
import time
import urllib.parse

from .client import AttndError, Client
from .records import noise_missed, verify_passed

# Run parameters the CLI spells as flags (the rest go through --param KEY=VALUE).
INT_PARAMS = ("batch", "heads", "kv_heads", "seq", "seq_q", "seq_kv", "head_dim", "head_dim_v", "window",
              "page_size", "num_pages", "warmup", "iters", "min_iters", "max_iters", "seed")
FLOAT_PARAMS = ("min_time_ms", "max_time_ms", "target_noise", "scale")
# seqlens_q and seqlens_kv go as written (128,512,77 / uniform:MIN:MAX / a tensor id): the
# server reads those text forms in a body too.
STR_PARAMS = ("device", "dtype", "mask", "cache", "model", "impl", "seqlens_q", "seqlens_kv")
BOOL_PARAMS = ("causal", "graph", "verify", "profile")
LIST_PARAMS = ("tags",)

TABLE_COLUMNS = ("id", "backend", "device", "batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "head_dim_v",
                 "window", "page_size", "seqlens", "dtype", "mask",
                 "status", "median_us", "rse", "noise", "tflops", "kernels", "verify", "tags", "error")

# The filters of GET /v1/runs the runs command spells as flags (docs/api.md, History).
RUNS_TEXT_FILTERS = ("backend", "status", "device", "node", "since", "tag", "dtype", "mask", "impl", "gpu", "commit")
RUNS_INT_FILTERS = ("batch", "heads", "kv_heads", "seq", "seq_q", "seq_kv", "head_dim", "head_dim_v", "window",
                    "page_size", "num_pages")
RUNS_BOOL_FILTERS = ("ragged",)
TERMINAL = ("done", "failed", "cancelled")
# --follow prints rows as they come, so its columns have fixed widths (wider cells push on).
FOLLOW_WIDTHS = {"id": 6, "backend": 9, "device": 6, "batch": 5, "heads": 5, "kv_heads": 8, "seq_q": 6, "seq_kv": 6,
                 "head_dim": 8, "head_dim_v": 10, "window": 6, "page_size": 9, "seqlens": 16, "dtype": 5, "mask": 6,
                 "status": 9, "median_us": 9, "rse": 7, "noise": 15, "tflops": 7, "kernels": 7, "verify": 6, "tags": 8}


def _bool(text):
    low = text.lower()
    if low in ("1", "true", "yes"):
        return True
    if low in ("0", "false", "no"):
        return False
    raise argparse.ArgumentTypeError("expected true/false, got %r" % text)


def _value(text):
    """--param values: JSON when they parse (numbers, booleans), else the string."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def _list(conv):
    def parse(text):
        try:
            return [conv(x) for x in text.split(",") if x.strip()]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc))
    return parse


def _add_common(p):
    p.add_argument("--url", default=None, help="server URL (default $ATTND_URL or http://127.0.0.1:8080)")
    p.add_argument("--token", default=None, help="bearer token (default $ATTND_TOKEN)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per HTTP exchange (default 600)")
    p.add_argument("--cacert", default=None, help="CA bundle to check an HTTPS server with")
    p.add_argument("--insecure", action="store_true", help="do not check the HTTPS certificate")


def _add_run_params(p, lists):
    """The run parameters as flags; lists: the grid's axes (PLAN_AXES) are _add_grid's."""
    skip = PLAN_AXES if lists else ()
    for name in INT_PARAMS:
        if name not in skip:
            p.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=None)
    for name in FLOAT_PARAMS:
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=float, default=None)
    for name in STR_PARAMS:
        if name not in skip:
            p.add_argument("--" + name.replace("_", "-"), dest=name, default=None)
    for name in BOOL_PARAMS:
        if name not in skip:
            p.add_argument("--" + name, dest=name, type=_bool, default=None, metavar="BOOL")
    p.add_argument("--tags", dest="tags", type=_list(str), default=None, metavar="A,B",
                   help="labels to find the runs by later (runs --tag A)")
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="any other run parameter (repeatable)")


def _run_params(args, axes=()):
    """The run parameters of the flags; axes: flags that are lists of a grid, not parameters."""
    params = {}
    for name in INT_PARAMS + FLOAT_PARAMS + STR_PARAMS + BOOL_PARAMS + LIST_PARAMS:
        if name in axes:
            continue
        v = getattr(args, name, None)
        if v is not None:
            params[name] = v
    for kv in args.param:
        if "=" not in kv:
            raise SystemExit("attnd-cli: --param needs KEY=VALUE, got %r" % kv)
        k, v = kv.split("=", 1)
        params[k] = _value(v)
    return params


def _pair(text):
    q, sep, kv = text.partition(":")
    if not sep:
        raise ValueError("a (seq_q, seq_kv) pair is written SEQ_Q:SEQ_KV, got %r" % text)
    return [int(q), int(kv)]


def _add_grid(p, required):
    """The grid flags of sweep and plan: the axes (comma-separated lists), repeat, a study,
    and the fixed run parameters."""
    p.add_argument("--backends", type=_list(str), required=required,
                   help="comma-separated, e.g. naive,math; backend:impl names an implementation (flash:tma)")
    p.add_argument("--model", type=_list(str), default=None, help="model presets (attnd-cli models)")
    p.add_argument("--batch", type=_list(int), default=None)
    p.add_argument("--heads", type=_list(int), default=None)
    p.add_argument("--kv-heads", dest="kv_heads", type=_list(int), default=None)
    p.add_argument("--seq", type=_list(int), default=None, help="comma-separated sequence lengths")
    p.add_argument("--seq-q-kv", dest="seq_q_kv", type=_list(_pair), default=None, metavar="Q:KV,…",
                   help="(seq_q, seq_kv) pairs, e.g. 1:4096,4096:4096 (not with --seq)")
    p.add_argument("--head-dim", dest="head_dim", type=_list(int), default=None)
    p.add_argument("--dtype", type=_list(str), default=None)
    p.add_argument("--mask", type=_list(str), default=None, help="none, causal, causal_bottom_right")
    p.add_argument("--window", type=_list(int), default=None)
    p.add_argument("--page-size", dest="page_size", type=_list(int), default=None)
    p.add_argument("--impl", type=_list(str), default=None, help="implementations of the backends (flash: tma,wgmma,…)")
    p.add_argument("--cache", type=_list(str), default=None, help="hot, cold")
    p.add_argument("--graph", type=_list(_bool), default=None, metavar="BOOL,…")
    p.add_argument("--repeat", type=int, default=None, help="run the whole grid this many times over (default 1)")
    p.add_argument("--study", action="store_true", default=None,
                   help="each point of the grid is a study of the backends, interleaved over --rounds")
    p.add_argument("--rounds", type=int, default=None, help="a study's rounds (default 3)")
    p.add_argument("--baseline", default=None, help="a study's baseline backend (default the first)")
    _add_run_params(p, lists=True)


def build_parser():
    ap = argparse.ArgumentParser(prog="attnd-cli", description="Run and sweep attention benchmarks on attnd.")
    sub = ap.add_subparsers(dest="cmd")
    sub.required = True

    p = sub.add_parser("run", help="one synchronous run; prints a summary (or --json: the record)")
    _add_common(p)
    p.add_argument("--backend", required=True)
    _add_run_params(p, lists=False)
    p.add_argument("--json", action="store_true", help="print the whole record as JSON")
    p.add_argument("--async", dest="async_", action="store_true", help="submit, wait, then print")

    p = sub.add_parser("sweep", help="runs over a grid of backends x shapes (flags or --plan); prints a table")
    _add_common(p)
    p.add_argument("--plan", default=None, metavar="FILE", help="the grid from a plan file (docs/plan.md) "
                   "instead of the grid and run flags")
    _add_grid(p, required=False)
    p.add_argument("--csv", default=None, metavar="FILE", help="write the table as CSV")
    p.add_argument("--json", default=None, metavar="FILE", help="write every record (or error) as JSON")
    p.add_argument("--retries", type=int, default=5, help="retries of a 429 queue_full (default 5)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")

    p = sub.add_parser("study", help="a study (POST /v1/studies): variants on one problem, interleaved over rounds; "
                       "prints its table (or --id ID: an existing study's)")
    _add_common(p)
    p.add_argument("--variants", type=_list(str), default=None,
                   help="backends or backend:impl, comma-separated (default the six of the profiling study)")
    p.add_argument("--rounds", type=int, default=None, help="how many times each variant runs (default 3)")
    p.add_argument("--baseline", default=None, help="the variant the ratios are to (default the first)")
    p.add_argument("--id", type=int, default=None, help="print study ID instead of making one")
    _add_run_params(p, lists=False)
    p.add_argument("--json", action="store_true", help="print the whole study record as JSON")
    p.add_argument("--no-wait", action="store_true", help="print the 202 answer (or the study as it is) at once")
    p.add_argument("--wait-timeout", type=float, default=None, help="seconds to wait for the study (default: forever)")

    p = sub.add_parser("compare", help="GET /v1/compare: is RUN faster or slower than BASE, by how much, beyond noise?")
    _add_common(p)
    p.add_argument("base", help="a run id, run ids (17,18,19), study:ID or study:ID:VARIANT")
    p.add_argument("run", help="the same forms as BASE")
    p.add_argument("--confidence", type=float, default=None, help="of the interval (default 0.95)")
    p.add_argument("--noise-floor", dest="noise_floor", type=float, default=None,
                   help="the run-to-run noise of a single run, relative (default 0.01)")
    p.add_argument("--json", action="store_true", help="print the server's answer as JSON")

    p = sub.add_parser("plan", help="print the plan file (docs/plan.md) the sweep flags describe, for attnd batch")
    _add_grid(p, required=True)

    for name, helptext in (("device", "GET /v1/device"), ("variants", "GET /v1/variants"),
                           ("nodes", "GET /v1/nodes: the fleet's nodes"),
                           ("models", "GET /v1/models: the model presets that --model names")):
        p = sub.add_parser(name, help=helptext)
        _add_common(p)
    p = sub.add_parser("get", help="GET /v1/runs/ID")
    _add_common(p)
    p.add_argument("id", type=int, help="the run's id")
    p = sub.add_parser("wait", help="wait for an async run to end; print its record")
    _add_common(p)
    p.add_argument("id", type=int, help="the run's id (the 202 of POST /v1/runs?async=true says it)")
    p.add_argument("--wait-timeout", type=float, default=None)
    p = sub.add_parser("runs", help="list runs (GET /v1/runs) as a table, --json records or --csv; --group-by "
                       "an aggregate; --follow new runs and each run until it is final")
    _add_common(p)
    p.add_argument("--after", type=int, default=0, help="only runs after this cursor (next_after)")
    p.add_argument("--before", type=int, default=None, help="only runs before this cursor (next_before)")
    p.add_argument("--order", choices=("oldest", "newest"), default="oldest")
    p.add_argument("--limit", type=_positive, default=None,
                   help="at most this many runs (groups with --group-by); with --follow, the latest this many first")
    p.add_argument("--follow", action="store_true",
                   help="keep polling: print new runs, and a run again whenever its status changes, until it is final")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between polls of --follow (default 1)")
    p.add_argument("--json", action="store_true", help="one JSON record per line instead of the table")
    p.add_argument("--csv", action="store_true", help="the server's CSV (GET /v1/runs?format=csv)")
    p.add_argument("--group-by", dest="group_by", default=None, metavar="FIELDS",
                   help="per group of these fields (backend,seq_q,…): count, median of medians, min, max")
    for name in RUNS_TEXT_FILTERS:
        p.add_argument("--" + name.replace("_", "-"), dest=name, default=None)
    for name in RUNS_INT_FILTERS:
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=None)
    for name in RUNS_BOOL_FILTERS:
        p.add_argument("--" + name.replace("_", "-"), dest=name, choices=("true", "false"), default=None)
    _add_tensors_and_cancel(sub)
    _explain_defaults(ap)
    return ap


def _positive(text):
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError("expected a positive integer, got %r" % text)
    return n


def _client(args, retry_429=0):
    verify = False if args.insecure else (args.cacert or True)
    return Client(args.url, token=args.token, timeout=args.timeout, verify=verify, retry_429=retry_429)


def _lengths_text(v):
    """One seqlens value as a short cell: 128,512,77 (cut after 24 characters), uniform:MIN:MAX,
    or the tensor's id."""
    if isinstance(v, list):
        text = ",".join(str(x) for x in v)
        return text if len(text) <= 24 else text[:23] + "…"
    if isinstance(v, dict) and v.get("dist") == "uniform":
        return "uniform:%s:%s" % (v.get("min"), v.get("max"))
    return str(v)


def seqlens_cell(p):
    """A ragged run's lengths for the table: "q … kv …" (the sides it has); None when dense."""
    parts = ["%s %s" % (side, _lengths_text(p["seqlens_" + side])) for side in ("q", "kv")
             if p.get("seqlens_" + side) is not None]
    return "; ".join(parts) or None


def row_of(rec, params=None, error=None):
    """One table row from a record (or the parameters and error of a refusal)."""
    rec = rec or {}
    p = dict(params or {})
    p.update(rec.get("params") or {})
    timing = rec.get("timing") or {}
    perf = rec.get("perf") or {}
    kernels = rec.get("kernels") or {}
    dev = rec.get("device") if isinstance(rec.get("device"), dict) else {}
    err = error
    if err is None and isinstance(rec.get("error"), dict):
        err = "%s: %s" % (rec["error"].get("code"), rec["error"].get("message"))
    return {
        "id": rec.get("id"),
        "backend": p.get("backend"),
        "device": dev.get("id") or p.get("device"),
        "batch": p.get("batch"),
        "heads": p.get("heads"),
        "kv_heads": p.get("kv_heads"),
        "seq_q": p.get("seq_q", p.get("seq")),
        "seq_kv": p.get("seq_kv", p.get("seq")),
        "head_dim": p.get("head_dim"),
        "head_dim_v": p.get("head_dim_v"),
        "window": p.get("window"),
        "page_size": p.get("page_size") or None,
        "seqlens": seqlens_cell(p),
        "dtype": p.get("dtype"),
        "mask": p.get("mask"),
        "status": rec.get("status") or ("refused" if error else None),
        "median_us": timing.get("median_us"),
        "rse": timing.get("rse"),
        "noise": "missed:%s" % timing.get("stop_reason") if noise_missed(rec) else None,
        "tflops": perf.get("tflops"),
        "kernels": kernels.get("per_forward"),
        "verify": {True: "pass", False: "FAIL"}.get(verify_passed(rec)),
        "tags": " ".join(p["tags"]) if isinstance(p.get("tags"), list) and p["tags"] else None,
        "error": err,
    }


def _fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "%.4g" % v
    return str(v)


MODEL_COLUMNS = ("name", "heads", "kv_heads", "head_dim", "head_dim_v", "window")


def format_models(models):
    """The presets as a table, their sources under it."""
    rows = [{c: m.get(c) for c in MODEL_COLUMNS} for m in models]
    notes = "".join("  %s: %s\n" % (m["name"], m.get("source", "")) for m in models)
    return format_table(rows, MODEL_COLUMNS) + "\nsources:\n" + notes


def format_table(rows, columns=TABLE_COLUMNS):
    """Fixed-width text table of rows (dicts); columns without any value are left out,
    error is always last and never padded."""
    cols = [c for c in columns if c == "status" or any(r.get(c) is not None for r in rows)]
    cells = [[_fmt(r.get(c)) for c in cols] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) if c != "error" else c for c, w in zip(cols, widths)).rstrip()]
    for row in cells:
        lines.append("  ".join(x.ljust(w) if cols[i] != "error" else x
                               for i, (x, w) in enumerate(zip(row, widths))).rstrip())
    return "\n".join(lines)


def _duration(seconds):
    """12.3s, 4m05s, 2h03m: short enough for a progress line."""
    seconds = max(0.0, seconds)
    if seconds < 60:
        return "%.1fs" % seconds
    if seconds < 3600:
        return "%dm%02ds" % (seconds // 60, seconds % 60)
    return "%dh%02dm" % (seconds // 3600, seconds % 3600 // 60)


class Progress:
    """A plain progress bar on stderr: redrawn in place on a terminal, one line per step
    otherwise (logs stay readable). Each line has the time so far and an ETA: the mean time
    of a step so far times the steps left."""


    def __init__(self, total, stream=None, enabled=True, width=30):
        self.total = total
        self.done = 0
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.width = width
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.t0 = time.monotonic()

    def step(self, label):
        self.done += 1
        if not self.enabled:
            return
        filled = int(self.width * self.done / max(self.total, 1))
        bar = "#" * filled + "-" * (self.width - filled)
        elapsed = time.monotonic() - self.t0
        eta = elapsed / self.done * (self.total - self.done)
        line = "[%s] %d/%d %s ETA %s %s" % (bar, self.done, self.total, _duration(elapsed), _duration(eta), label)
        if self.tty:
            self.stream.write("\r\x1b[K" + line[:200])
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


# ---- plans (docs/plan.md): the sweep grid as a file; attnd batch reads the same format

# The axes in expansion order, after backends (server/front/batch/batch_plan.c's order), and
# what each holds; seq_q_kv holds [seq_q, seq_kv] pairs.
PLAN_AXIS_KINDS = (("model", "strings"), ("batch", "integers"), ("heads", "integers"), ("kv_heads", "integers"),
                   ("seq", "integers"), ("seq_q_kv", "pairs"), ("head_dim", "integers"), ("dtype", "strings"),
                   ("mask", "strings"), ("window", "integers"), ("page_size", "integers"), ("impl", "strings"),
                   ("cache", "strings"), ("graph", "booleans"))
PLAN_AXES = tuple(name for name, _ in PLAN_AXIS_KINDS)
PLAN_KEYS = ("backends",) + PLAN_AXES + ("params", "repeat", "study", "description")
PLAN_REFUSED_PARAMS = ("q", "k", "v", "block_table", "keep_output", "async")  # a server's session, not a plan's
PLAN_MAX_REPEAT = 1000
STUDY_MAX_VARIANTS, STUDY_MAX_ROUNDS, STUDY_DEFAULT_ROUNDS, STUDY_MAX_RUNS = 16, 100, 3, 1000
_KIND_TEXT = {"integers": "integers", "strings": "non-empty strings", "booleans": "booleans",
              "pairs": "[seq_q, seq_kv] pairs of integers"}


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def _axis_value_ok(v, kind):
    if kind == "integers":
        return _is_int(v)
    if kind == "strings":
        return isinstance(v, str) and bool(v)
    if kind == "booleans":
        return isinstance(v, bool)
    return isinstance(v, list) and len(v) == 2 and all(_is_int(x) for x in v)


def _axis_sets(plan, name):
    """Whether run parameter name is set by an axis of the plan: its own, or seq_q_kv's."""
    return name in PLAN_AXES and name in plan or ("seq_q_kv" in plan and name in ("seq", "seq_q", "seq_kv"))


class PlanError(ValueError):
    """A plan that attnd batch would refuse (exit 2); the message names the key."""


def _check_study(plan):
    study = plan.get("study")
    if study is None or isinstance(study, bool):
        return
    if not isinstance(study, dict):
        raise PlanError('"study" is true, false or {"rounds": N, "baseline": "BACKEND"}')
    for key in study:
        if key not in ("rounds", "baseline"):
            raise PlanError("study.%s: a study takes rounds and baseline" % key)
    rounds = study.get("rounds", STUDY_DEFAULT_ROUNDS)
    if not _is_int(rounds) or not 1 <= rounds <= STUDY_MAX_ROUNDS:
        raise PlanError("study.rounds must be an integer from 1 to %d" % STUDY_MAX_ROUNDS)
    if "baseline" in study and study["baseline"] not in plan["backends"]:
        raise PlanError("study.baseline must be one of the plan's backends")


def check_plan(plan):
    """Raise PlanError unless plan is a plan attnd batch accepts (server/front/batch/batch_plan.c checks
    the same; the run parameters themselves are the server's to check)."""
    if not isinstance(plan, dict):
        raise PlanError('a plan is a JSON object {"backends": [...], ...}')
    for key in plan:
        if key not in PLAN_KEYS:
            raise PlanError('unknown key "%s"; a plan has %s' % (key, ", ".join(PLAN_KEYS)))
    if "backends" not in plan:
        raise PlanError('"backends" is missing (a non-empty array of backend names)')
    for key, kind in (("backends", "strings"),) + PLAN_AXIS_KINDS:
        if key not in plan:
            continue
        values = plan[key]
        if not (isinstance(values, list) and values and all(_axis_value_ok(v, kind) for v in values)):
            raise PlanError('"%s" must be a non-empty array of %s' % (key, _KIND_TEXT[kind]))
    if "seq" in plan and "seq_q_kv" in plan:
        raise PlanError('"seq" and "seq_q_kv" are both axes of the lengths; give one')
    if "impl" in plan:
        for b in plan["backends"]:
            if ":" in b:
                raise PlanError("backend %s names its impl, and impl is an axis; give it in one place" % b)
    _check_study(plan)
    if "description" in plan and not isinstance(plan["description"], str):
        raise PlanError('"description" must be a string')
    repeat = plan.get("repeat", 1)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= PLAN_MAX_REPEAT:
        raise PlanError('"repeat" must be an integer from 1 to %d' % PLAN_MAX_REPEAT)
    params = plan.get("params", {})
    if not isinstance(params, dict):
        raise PlanError('"params" must be an object of run parameters')
    for key in params:
        if key == "backend":
            raise PlanError('params.backend: backends are an axis; list them in "backends"')
        if _axis_sets(plan, key):
            raise PlanError("params.%s: %s is also an axis of the plan; give it in one place" % (key, key))
        if key in PLAN_REFUSED_PARAMS:
            raise PlanError("params.%s: not in a plan (resident tensors, keep_output and async belong to a "
                            "server's session)" % key)
    if _study_of(plan):
        backends = plan["backends"]
        if len(backends) > STUDY_MAX_VARIANTS:
            raise PlanError("a study has at most %d variants (backends)" % STUDY_MAX_VARIANTS)
        for i, b in enumerate(backends):
            if b in backends[:i]:
                raise PlanError("backend %s is named twice (a study's variants are distinct)" % b)
        rounds, _ = _study_of(plan)
        if rounds * len(backends) > STUDY_MAX_RUNS:
            raise PlanError("%d backends x %d rounds is more than a study's %d runs"
                            % (len(backends), rounds, STUDY_MAX_RUNS))


_SCHEMA_TYPES = {"integer": "an integer", "number": "a number", "boolean": "true or false"}


def _value_fits(value, schema):
    """Whether a JSON value could be its run parameter as the server reads it: an integer
    parameter refuses a fraction (1.0) or a boolean, a number a boolean, a boolean a number,
    and a number out of the schema's bounds is refused. Strings are the server's to read (it
    takes "12" for 12 and "true" for true)."""
    kind = schema.get("type")
    if isinstance(value, str):
        return True
    if kind == "integer" and not _is_int(value):
        return False
    if kind == "number" and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return False
    if kind == "boolean":
        return isinstance(value, bool)
    return not (value < schema.get("minimum", value) or value > schema.get("maximum", value))


def check_plan_params(plan, run_params_schema):
    """Raise PlanError unless every value of the plan's params could be its run parameter in the
    server's RunParams schema (GET /openapi.json): "iters": 1.0 is refused here, before any
    run, as attnd batch refuses it, not run by run. Parameters the schema does not name are left
    to the server (a server older than this client may know fewer)."""
    props = (run_params_schema or {}).get("properties") or {}
    for key, value in (plan.get("params") or {}).items():
        schema = props.get(key)
        if schema and schema.get("type") in _SCHEMA_TYPES and not _value_fits(value, schema):
            bounds = "".join(" %s %s" % (w, schema[k]) for k, w in (("minimum", "from"), ("maximum", "to"))
                             if k in schema)
            raise PlanError("params.%s: %s must be %s%s, got %s" % (key, key, _SCHEMA_TYPES[schema["type"]], bounds,
                                                                    json.dumps(value)))


def _study_of(plan):
    """(rounds, baseline) of a plan that holds a study, else None."""
    study = plan.get("study")
    if study is None or study is False:
        return None
    study = study if isinstance(study, dict) else {}
    return study.get("rounds", STUDY_DEFAULT_ROUNDS), study.get("baseline", plan["backends"][0])


def _backend_params(name):
    """A plan's backend as run parameters: "flash:tma" is backend flash, impl tma."""
    backend, sep, impl = name.partition(":")
    return {"backend": backend, "impl": impl} if sep else {"backend": backend}


def _points(plan):
    """The grid's points without the backends, in expansion order: dicts of run parameters."""
    axes = [(name, plan[name]) for name in PLAN_AXES if name in plan]
    points = []
    for combo in itertools.product(*[values for _, values in axes]):
        point = {}
        for (name, _), value in zip(axes, combo):
            if name == "seq_q_kv":
                point["seq_q"], point["seq_kv"] = value
            else:
                point[name] = value
        points.append(point)
    return points


def _run_of(plan, backend, point):
    p = dict(plan.get("params", {}))
    if _study_of(plan) and "verify" not in p:
        p["verify"] = True  # a study verifies unless told not to, as POST /v1/studies does
    p.update(_backend_params(backend))
    p.update(point)
    return p


def plan_grid(plan):
    """The run parameter dicts of a plan, in the order attnd batch runs them: the whole grid
    `repeat` times over; in it backends outermost, then the axes in PLAN_AXES' order. A plan
    with a study: in each pass, point after point, each point's backends interleaved over
    the study's rounds (in order, reversed, in order, …)."""
    check_plan(plan)
    points, backends, study = _points(plan), plan["backends"], _study_of(plan)
    grid = []
    for _ in range(plan.get("repeat", 1)):
        if not study:
            grid.extend(_run_of(plan, b, point) for b in backends for point in points)
            continue
        for point in points:
            for r in range(study[0]):
                grid.extend(_run_of(plan, b, point) for b in (backends if r % 2 == 0 else backends[::-1]))
    return grid


def plan_studies(plan):
    """The POST /v1/studies bodies of a plan with a study, in the order attnd batch runs them:
    one per point of the grid, `repeat` times over."""
    check_plan(plan)
    rounds, baseline = _study_of(plan)
    bodies = []
    for _ in range(plan.get("repeat", 1)):
        for point in _points(plan):
            body = dict(plan.get("params", {}))
            body.update(point)
            body.update({"variants": list(plan["backends"]), "rounds": rounds, "baseline": baseline})
            bodies.append(body)
    return bodies


def plan_of_args(args):
    """The plan the sweep flags describe (attnd-cli plan prints it)."""
    plan = {"backends": args.backends}
    for name in PLAN_AXES:
        if getattr(args, name):
            plan[name] = getattr(args, name)
    params = _run_params(args, axes=PLAN_AXES)
    if params:
        plan["params"] = params
    if args.repeat is not None:
        plan["repeat"] = args.repeat
    if args.study or args.rounds is not None or args.baseline is not None:
        study = {k: getattr(args, k) for k in ("rounds", "baseline") if getattr(args, k) is not None}
        plan["study"] = study or True
    return plan


def _plan_object(pairs):
    """json's object_pairs_hook for plans: a key twice is refused, as attnd batch refuses it
    (json.load would keep the last, cJSON the first)."""
    obj = {}
    for key, value in pairs:
        if key in obj:
            raise PlanError("the key '%s' appears twice" % key)
        obj[key] = value
    return obj


def _no_constant(name):
    raise PlanError("%s is no JSON number" % name)  # json.load takes NaN and Infinity


def _check_no_nul(value):
    """No \\u0000 in a plan's strings: attnd batch refuses it (cJSON would cut the string)."""
    if isinstance(value, str) and "\0" in value:
        raise PlanError("a string holds an escaped NUL (\\u0000): %r" % value)
    if isinstance(value, dict):
        for key, item in value.items():
            _check_no_nul(key)
            _check_no_nul(item)
    elif isinstance(value, list):
        for item in value:
            _check_no_nul(item)


def read_plan(path):
    """A plan file, checked as attnd batch checks it: JSON with no key twice, nothing after it
    and no \\u0000. Raises PlanError (unreadable and bad JSON included)."""
    try:
        with open(path) as f:
            plan = json.load(f, object_pairs_hook=_plan_object, parse_constant=_no_constant)
        _check_no_nul(plan)
    except OSError as exc:
        raise PlanError("cannot read %s: %s" % (path, exc))
    except PlanError as exc:
        raise PlanError("%s: %s" % (path, exc))
    except ValueError as exc:
        raise PlanError("%s is not JSON: %s" % (path, exc))
    check_plan(plan)
    return plan


def sweep_plan(args):
    """The plan of a sweep: its --plan file, or the plan its flags describe."""
    if getattr(args, "plan", None):
        flags = [name for name in ("backends", "repeat", "study", "rounds", "baseline") + PLAN_AXES
                 if getattr(args, name) is not None]
        if flags or _run_params(args, axes=PLAN_AXES):
            raise PlanError("--plan holds the whole grid; drop the grid and run flags (%s)"
                            % ", ".join(flags or ["run parameters"]))
        return read_plan(args.plan)
    if not args.backends:
        raise PlanError("sweep needs --backends (or --plan FILE)")
    plan = plan_of_args(args)
    check_plan(plan)
    return plan


def sweep_grid(args):
    """The run parameter dicts of a sweep: its --plan file's, or the plan its flags describe."""
    return plan_grid(sweep_plan(args))


def point_label(params):
    """A grid point's run parameters as a line: backend first, then the rest in a fixed order."""
    keys = ["backend", "impl"] + [k for k in ("model", "batch", "heads", "kv_heads", "seq", "seq_q", "seq_kv",
                                             "head_dim", "dtype", "mask", "window", "page_size", "num_pages",
                                             "seqlens_q", "seqlens_kv", "cache", "graph")]
    return " ".join("%s=%s" % (k, params[k]) if k != "backend" else str(params[k]) for k in keys if k in params)


class Summary:
    """A grid's points over its repeats: per point its done runs, the median of their medians
    and their range, in the order the points first came (attnd batch ends with the same)."""

    def __init__(self):
        self.points = {}

    def add(self, params, median_us):
        key = json.dumps(params, sort_keys=True)
        point = self.points.setdefault(key, {"label": point_label(params), "runs": 0, "medians": []})
        point["runs"] += 1
        if isinstance(median_us, (int, float)):
            point["medians"].append(median_us)

    def rows(self):
        out = []
        for p in self.points.values():
            m = sorted(p["medians"])
            n = len(m)
            med = (m[n // 2] if n % 2 else 0.5 * (m[n // 2 - 1] + m[n // 2])) if n else None
            out.append({"point": p["label"], "done": "%d/%d" % (n, p["runs"]), "median_us": med,
                        "min_us": m[0] if n else None, "max_us": m[-1] if n else None})
        return out

    def write(self, stream):
        if not self.points:
            return
        stream.write("summary, one line per point of the grid: its done runs, the median of their medians and "
                     "their range\n")
        stream.write(format_table(self.rows(), ("point", "done", "median_us", "min_us", "max_us")) + "\n")
        stream.flush()


STUDY_COLUMNS = ("variant", "status", "median_us", "p10_p90_us", "vs_baseline", "kernels", "host_us", "tflops",
                 "verify", "error")


def study_rows(rec):
    """The rows of a study's table for format_table: the ratio to the baseline with its 95%
    interval (* when significant), p10–p90 over rounds, verify as pass/FAIL and rel_l2_err."""
    rows = []
    for row in rec.get("table") or []:
        vs = row.get("vs_baseline") or {}
        if not vs:
            ratio = None
        elif vs.get("low") is None and vs.get("ratio") == 1:
            ratio = "1 (baseline)"
        else:
            ratio = "%s [%s-%s]%s" % (_fmt(vs.get("ratio")), _fmt(vs.get("low")), _fmt(vs.get("high")),
                                      " *" if vs.get("significant") else "")
        verify = row.get("verify")
        err = row.get("error")
        rows.append({
            "variant": row.get("variant"), "status": row.get("status"), "median_us": row.get("median_us"),
            "p10_p90_us": None if row.get("p10_us") is None else "%s-%s" % (_fmt(row["p10_us"]), _fmt(row["p90_us"])),
            "vs_baseline": ratio, "kernels": row.get("kernels_per_forward"), "host_us": row.get("host_us"),
            "tflops": row.get("tflops"),
            "verify": None if not verify else "%s %s" % ("pass" if verify.get("pass") else "FAIL",
                                                         _fmt(verify.get("rel_l2_err"))),
            "error": None if not err else "%s: %s" % (err.get("code"), err.get("message")),
        })
    return rows


def format_study(rec):
    """A study record as a heading and its table."""
    head = "study %s: %s, %s rounds, baseline %s, %s/%s runs done" % (
        rec.get("id"), rec.get("status"), rec.get("rounds"), rec.get("baseline"),
        (rec.get("progress") or {}).get("done"), (rec.get("progress") or {}).get("total"))
    if isinstance(rec.get("error"), dict):
        head += " (%s: %s)" % (rec["error"].get("code"), rec["error"].get("message"))
    return head + "\n" + format_table(study_rows(rec), STUDY_COLUMNS) + "\n"


def study_failed(rec):
    """Whether a study did not end well: not done, a variant failed, or an output failed verify."""
    return rec.get("status") != "done" or any(
        row.get("status") != "done" or (row.get("verify") or {}).get("pass") is False for row in rec.get("table") or [])


def _sweep_studies(client, plan, args, out, resident):
    """A plan with a study: one POST /v1/studies per point, each printed as it ends; resident:
    the server's tensors every study takes (_resident_inputs)."""
    bodies = [dict(body, **resident) for body in plan_studies(plan)]
    progress = Progress(len(bodies), enabled=not args.no_progress)
    summary, results, failures = Summary(), [], 0
    for body in bodies:
        shown = ("variants", "rounds", "baseline") + tuple(resident)
        label = point_label({k: v for k, v in body.items() if k not in shown} | {"backend": ",".join(body["variants"])})
        try:
            rec = client.study(wait=True, **body)
            out.write(format_study(rec) + "\n")
            out.flush()
            results.append({"params": body, "study": rec})
            failures += study_failed(rec)
            point = {k: v for k, v in body.items() if k not in ("variants", "rounds", "baseline")}
            for row in rec.get("table") or []:
                summary.add(dict(point, **_backend_params(row["variant"])), row.get("median_us"))
        except AttndError as exc:
            failures += 1
            out.write("study of %s: %s: %s\n" % (label, exc.code, exc.message))
            results.append({"params": body, "error": {"status": exc.status, "code": exc.code,
                                                      "message": exc.message, "field": exc.field}})
        progress.step(label)
    if plan.get("repeat", 1) > 1:
        summary.write(sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")
    return 1 if failures else 0


def cmd_sweep(args, out):
    client = _client(args, retry_429=args.retries)
    resident = _resident_inputs(args)
    plan = sweep_plan(args)
    check_plan_params(plan, client.run_params_schema())
    if _study_of(plan):
        return _sweep_studies(client, plan, args, out, resident)
    grid = [dict(p, **resident) for p in plan_grid(plan)]
    progress = Progress(len(grid), enabled=not args.no_progress)
    rows, results, failures, summary = [], [], 0, Summary()
    for params in grid:
        label = point_label(params)
        try:
            rec = client.run(check=False, **params)
            rows.append(row_of(rec, params))
            results.append({"params": params, "record": rec})
            if rec.get("status") != "done":
                failures += 1
            summary.add(params, (rec.get("timing") or {}).get("median_us") if rec.get("status") == "done" else None)
        except AttndError as exc:
            failures += 1
            rows.append(row_of(None, params, "%s: %s" % (exc.code, exc.message)))
            results.append({"params": params, "error": {"status": exc.status, "code": exc.code,
                                                        "message": exc.message, "field": exc.field}})
            summary.add(params, None)
        progress.step(label)
    out.write(format_table(rows) + "\n")
    out.flush()
    bad_verify = _flag_runs([x.get("record") for x in results])   # before the summary: it ends stderr
    summary.write(sys.stderr)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(TABLE_COLUMNS))
            w.writeheader()
            for r in rows:
                w.writerow({k: ("" if r.get(k) is None else r.get(k)) for k in TABLE_COLUMNS})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
            f.write("\n")
    return 1 if failures or bad_verify else 0


# ---- studies and comparisons (docs/api.md, Studies and Compare)

def cmd_study(args, out):
    client = _client(args)
    if args.id is not None:
        rec = client.get_study(args.id)
        if not args.no_wait and rec.get("status") not in ("done", "failed", "cancelled"):
            rec = client.wait_study(args.id, timeout=args.wait_timeout)
    else:
        params = _run_params(args)
        for name in ("variants", "rounds", "baseline"):
            if getattr(args, name) is not None:
                params[name] = getattr(args, name)
        if args.no_wait:
            accepted = client.study(wait=False, **params)
            out.write(json.dumps(accepted) + "\n")
            return 0
        rec = client.study(wait=True, timeout=args.wait_timeout, **params)
    if args.json:
        out.write(json.dumps(rec, indent=1) + "\n")
    else:
        out.write(format_study(rec))
    return 1 if study_failed(rec) else 0


def format_comparison(body):
    lines = []
    for row in body.get("rows") or []:
        b, r = row.get("base") or {}, row.get("run") or {}
        what = "variant %s: " % row["variant"] if row.get("variant") else ""
        lines.append("%sbase %s (%s, median %s us, runs %s)  run %s (%s, median %s us, runs %s)" % (
            what, body.get("base"), b.get("backend"), _fmt(b.get("median_us")), ",".join(map(str, b.get("runs") or [])),
            body.get("run"), r.get("backend"), _fmt(r.get("median_us")), ",".join(map(str, r.get("runs") or []))))
        interval = "-" if row.get("low") is None else "[%s, %s]" % (_fmt(row["low"]), _fmt(row["high"]))
        lines.append("  ratio %s %s at %g%%: %s" % (_fmt(row.get("ratio")), interval,
                                                  100 * (body.get("confidence") or 0.95), row.get("verdict")))
    warnings = body.get("warnings") or []
    if warnings:
        lines.append("warnings:")
        lines.extend("  %s: %s" % (w.get("field"), w.get("message")) for w in warnings)
    return "\n".join(lines) + "\n"


def cmd_compare(args, out):
    body = _client(args).compare(args.base, args.run, confidence=args.confidence, noise_floor=args.noise_floor)
    out.write(json.dumps(body, indent=1) + "\n" if args.json else format_comparison(body))
    return 0


def cmd_run(args, out):
    client = _client(args)
    params = _run_params(args)
    params["backend"] = args.backend
    if args.async_:
        rec = client.wait(client.submit(**params)["id"])
    else:
        rec = client.run(check=False, **params)
    if args.json:
        out.write(json.dumps(rec, indent=1) + "\n")
    else:
        out.write(format_table([row_of(rec)]) + "\n")
    bad_verify = _flag_runs([rec])
    return 0 if rec.get("status") == "done" and not bad_verify else 1


# ---- runs: the history (GET /v1/runs)

def _runs_filters(args):
    names = RUNS_TEXT_FILTERS + RUNS_INT_FILTERS + RUNS_BOOL_FILTERS
    return {k: getattr(args, k) for k in names if getattr(args, k) is not None}


def _follow_line(row, columns):
    cells = [_fmt(row.get(c)) for c in columns]
    return "  ".join(x.ljust(FOLLOW_WIDTHS.get(c, 0)) if c != "error" else x for c, x in zip(columns, cells)).rstrip()


def cmd_runs(args, out):
    client = _client(args)
    filters = _runs_filters(args)
    if args.follow and (args.csv or args.group_by or args.order == "newest" or args.before is not None):
        raise UsageError("--follow lists oldest first as runs come: not with --csv, --group-by, --order newest "
                         "or --before")
    if args.group_by:
        body = client.aggregate(args.group_by, limit=args.limit, order=None, before=args.before,
                                after=args.after or None, **filters)
        if args.json:
            out.write(json.dumps(body, indent=1) + "\n")
        else:
            cols = tuple(body.get("group_by") or ()) + ("count", "median_us", "min_us", "max_us")
            out.write(format_table(body.get("groups") or [], cols) + "\n")
            if body.get("more"):
                out.write("(more groups: raise --limit)\n")
        return 0
    if args.csv:
        return _runs_csv(client, args, filters, out)
    if args.follow:
        return _runs_follow(client, args, filters, out)
    rows = client.iter_runs(after=args.after, before=args.before, order=args.order, max_runs=args.limit,
                            limit=min(args.limit or 1000, 1000), **filters)
    if args.json:
        for rec in rows:
            out.write(json.dumps(rec) + "\n")
            out.flush()
    else:
        out.write(format_table([row_of(rec) for rec in rows]) + "\n")
    return 0


def _runs_csv(client, args, filters, out):
    """Pages of the server's CSV, its header line once, at most --limit rows."""
    left, cursor, first = args.limit, (args.before if args.order == "newest" else args.after), True
    while left is None or left > 0:
        size = min(left or 1000, 1000)
        if args.order == "newest":
            text, nxt = client.runs_csv(limit=size, order="newest", before=cursor, after=args.after or None, **filters)
        else:
            text, nxt = client.runs_csv(after=cursor, limit=size, **filters)
        lines = text.splitlines(True)
        out.write("".join(lines if first else lines[1:]))
        out.flush()
        first = False
        rows = len(lines) - 1
        if left is not None:
            left -= rows
        if rows < size or nxt is None or nxt == cursor:
            return 0
        cursor = nxt
    return 0


def _runs_follow(client, args, filters, out):
    """The runs so far (all after --after, or the latest --limit), then every new one as it
    comes; a run printed before it was final is asked for again every poll and printed again
    whenever its status changes, until it is done, failed or cancelled."""
    if args.limit:  # the latest N, oldest of them first; next_after: where the newest of them is
        page = client.runs(limit=min(args.limit, 1000), order="newest", after=args.after or None, **filters)
        backlog, cursor = list(reversed(page.get("runs") or [])), page.get("next_after") or args.after
    else:
        backlog, cursor = [], args.after
    columns = [c for c in TABLE_COLUMNS]
    pending = {}  # id -> the status last printed, for runs not final yet

    def show(rec):
        if args.json:
            out.write(json.dumps(rec) + "\n")
        else:
            out.write(_follow_line(row_of(rec), columns) + "\n")
        out.flush()
        if rec.get("status") in TERMINAL:
            pending.pop(rec.get("id"), None)
        else:
            pending[rec.get("id")] = rec.get("status")

    if not args.json:
        out.write(_follow_line({c: c for c in columns}, columns) + "\n")
        out.flush()
    for rec in backlog:
        show(rec)
    while True:
        page = client.runs(after=cursor, limit=1000, **filters)
        for rec in page.get("runs") or []:
            show(rec)
        nxt = page.get("next_after")
        if page.get("runs"):
            cursor = nxt
            continue  # more may wait: no sleep
        for run_id, status in list(pending.items()):
            rec = client.get_run(run_id)
            if rec.get("status") != status:
                show(rec)
        time.sleep(args.interval)


class UsageError(Exception):
    """Flags that do not go together (exit 2)."""


# ---- cancel and tensors

TENSOR_COLUMNS = ("id", "name", "shape", "dtype", "bytes", "device", "node", "state", "created")


def format_tensors(tensors):
    rows = [dict(t, shape="x".join(str(n) for n in t["shape"]) if isinstance(t.get("shape"), list) else None)
            for t in tensors]
    return format_table(rows, TENSOR_COLUMNS)


def cmd_cancel(args, out):
    """Cancel each queued run; the ones cancelled are printed, the refusals (409 not_queued:
    already running or finished; 404) said on stderr, and the exit is 1 if there was one."""
    client = _client(args)
    cancelled, refused = [], 0
    for run_id in args.ids:
        try:
            cancelled.append(client.cancel(run_id))
        except AttndError as exc:
            refused += 1
            sys.stderr.write("attnd-cli: run %d: %s\n" % (run_id, exc))
    if args.json:
        for rec in cancelled:
            out.write(json.dumps(rec) + "\n")
    elif cancelled:
        out.write(format_table([row_of(rec) for rec in cancelled]) + "\n")
    return 1 if refused else 0


def cmd_tensors(args, out):
    client = _client(args)
    if args.tensors_cmd == "list":
        body = client.tensors()
        if args.json:
            out.write(json.dumps(body, indent=1) + "\n")
        elif body.get("tensors"):
            out.write(format_tensors(body["tensors"]) + "\n")
        else:  # nothing on stdout, so that a script reading the table reads no rows
            sys.stderr.write("attnd-cli: no resident tensors\n")
        return 0
    if args.tensors_cmd == "upload":
        name = args.name
        if name is None and not args.file.endswith(".safetensors") and args.format != "safetensors":
            name = os.path.splitext(os.path.basename(args.file))[0]
        try:
            body = client.upload_file(args.file, name=name, dtype=args.dtype, shape=args.shape, device=args.device,
                                      format=args.format)
        except OSError as exc:
            raise UsageError("cannot read %s: %s" % (args.file, exc))
        made = body["tensors"] if isinstance(body.get("tensors"), list) else [body]
        out.write(json.dumps(body, indent=1) + "\n" if args.json else format_tensors(made) + "\n")
        return 0
    if args.tensors_cmd == "download":
        resp = client.request("GET", "/v1/tensors/%s/data" % urllib.parse.quote(args.id, safe=""),
                              params={"format": args.format})
        with open(args.out, "wb") as f:
            f.write(resp.content)
        sys.stderr.write("attnd-cli: %s: %d bytes written to %s\n" % (args.id, len(resp.content), args.out))
        return 0
    failed = 0
    for tensor_id in args.ids:  # delete
        try:
            client.delete_tensor(tensor_id)
            out.write("deleted %s\n" % tensor_id)
        except AttndError as exc:
            failed += 1
            sys.stderr.write("attnd-cli: %s: %s\n" % (tensor_id, exc))
    return 1 if failed else 0


def _add_tensors_and_cancel(sub):
    """attnd-cli cancel ID… and attnd-cli tensors list|upload|download|delete."""
    p = sub.add_parser("cancel", help="cancel queued runs (DELETE /v1/runs/ID); prints them, now cancelled")
    _add_common(p)
    p.add_argument("ids", type=int, nargs="+", metavar="ID", help="the runs to cancel")
    p.add_argument("--json", action="store_true", help="print the records as JSON lines (default: a table)")

    p = sub.add_parser("tensors", help="resident tensors (docs/tensors.md): list, upload, download, delete")
    tsub = p.add_subparsers(dest="tensors_cmd", metavar="{list,upload,download,delete}")
    tsub.required = True
    t = tsub.add_parser("list", help="GET /v1/tensors, as a table")
    _add_common(t)
    t.add_argument("--json", action="store_true", help="print the server's JSON (default: a table)")
    t = tsub.add_parser("upload", help="POST /v1/tensors: a .npy file, a safetensors file (every tensor in it) or "
                        "raw bytes with --dtype and --shape; prints the tensors made (their ids go in --param q=ID)")
    _add_common(t)
    t.add_argument("file", help="the file to upload")
    t.add_argument("--name", default=None, help="the tensor's name (default: the file's name without its "
                   "extension; a safetensors file's tensors keep their own)")
    t.add_argument("--device", default=None, help="cpu or cuda:N (server default: the first GPU, else cpu)")
    t.add_argument("--dtype", default=None, help="bf16, fp16 or fp32: needed for raw bytes, and for a .npy of "
                   "bf16 bits (uint16) (default: the file's)")
    t.add_argument("--shape", default=None, metavar="D0,D1,…", help="the shape of raw bytes (default: the file's)")
    t.add_argument("--format", choices=("npy", "safetensors", "raw"), default=None,
                   help="what the file holds (default: the server tells by content)")
    t.add_argument("--json", action="store_true", help="print the server's JSON (default: a table)")
    t = tsub.add_parser("download", help="GET /v1/tensors/ID/data into a file")
    _add_common(t)
    t.add_argument("id", help="the tensor's id (t4)")
    t.add_argument("--out", required=True, metavar="FILE", help="where to write it (required)")
    t.add_argument("--format", choices=("npy", "raw"), default="npy",
                   help="npy (bf16 as <u2), or raw row-major bytes (default: npy)")
    t = tsub.add_parser("delete", help="DELETE /v1/tensors/ID: free them")
    _add_common(t)
    t.add_argument("ids", nargs="+", metavar="ID", help="the tensors to delete")


# ---- every flag's help says its default

# The run parameter flags: what each is, and the server's default as docs/api.md's parameter
# table words it (a flag left out sends nothing, so the server's default applies).
RUN_PARAM_HELP = {
    "device": ("cpu or cuda:N", "cuda:0 for GPU variants, cpu for cpu variants"),
    "model": ("a model preset (attnd-cli models): heads, kv_heads, head_dim, head_dim_v, window, scale", "none"),
    "batch": ("sequences", "8"),
    "heads": ("attention heads of the queries", "16"),
    "kv_heads": ("heads of k and v, dividing heads (1: multi-query)", "heads"),
    "seq": ("sets seq_q and seq_kv", "1024"),
    "seq_q": ("query length; overrides seq", "seq"),
    "seq_kv": ("key and value length; overrides seq", "seq"),
    "head_dim": ("head dimension of q and k", "64"),
    "head_dim_v": ("head dimension of v and the output", "head_dim"),
    "dtype": ("bf16, fp16 or fp32", "bf16"),
    "causal": ("short for --mask: true is causal, false is none", "true"),
    "mask": ("none, causal or causal_bottom_right", "causal"),
    "window": ("sliding window: keys more than this many positions back are masked", "none"),
    "page_size": ("tokens a page of a paged K/V cache (vLLM's layout, a block table per sequence)", "0: contiguous"),
    "num_pages": ("pages the paged cache holds (with --page-size)", "the pages needed and a quarter more"),
    "seqlens_q": ("each sequence's query length, a ragged batch: 128,512,77, uniform:MIN:MAX (drawn from the "
                  "seed) or a resident int32 tensor's id", "every sequence seq_q"),
    "seqlens_kv": ("each sequence's key length: the same forms", "every sequence seq_kv"),
    "scale": ("multiplies the scores", "1/sqrt(head_dim)"),
    "seed": ("of the generated inputs", "0"),
    "warmup": ("forwards before timing", "5"),
    "iters": ("timed forwards; 0: the stopping rule (min/max iters and time, target noise)", "0"),
    "min_iters": ("the stopping rule times at least this many forwards", "10"),
    "max_iters": ("the stopping rule times at most this many forwards", "1000"),
    "min_time_ms": ("the stopping rule times at least this long", "20"),
    "max_time_ms": ("the stopping rule times at most this long", "2000"),
    "target_noise": ("stop once timing.rse is at or below this; a run that ends above it is flagged in "
                     "the noise column", "0.005"),
    "cache": ("hot, or cold: flush L2 before every timed forward (GPU only)", "hot"),
    "graph": ("time replays of a captured CUDA graph (GPU only)", "false"),
    "verify": ("compare the output with the fp64 reference (a failed verify exits 1)", "false"),
    "profile": ("one extra forward under CUPTI for the kernel table", "true"),
    "impl": ("the kernel family, one of the backend's impls (attnd-cli variants)", "the backend's default"),
    "tags": ("labels to find the runs by later (runs --tag A)", "none"),
}

# The filters of attnd-cli runs (GET /v1/runs, docs/api.md History) and its own flags.
RUNS_FLAG_HELP = {
    "backend": "only runs of this backend", "status": "only runs in this state (queued, running, done, failed, "
    "cancelled)", "device": "only runs on this device (cpu, cuda:N)", "node": "only runs of this node",
    "since": "only runs created at or after this ISO-8601 time (2026-12-02, 2026-12-02T10:31)",
    "tag": "only runs with this tag", "dtype": "only runs of this dtype", "mask": "only runs of this mask",
    "impl": "only runs whose implementation (impl_used, else impl) is this",
    "gpu": "only runs on a device of this name (device.name)",
    "commit": "only runs of a server built from this commit (build.commit)",
    "batch": "only runs of this batch", "heads": "only runs with this many heads",
    "kv_heads": "only runs with this many K/V heads", "seq": "only runs whose seq_q and seq_kv are both this",
    "seq_q": "only runs of this query length", "seq_kv": "only runs of this key length",
    "head_dim": "only runs of this head_dim", "head_dim_v": "only runs of this head_dim_v",
    "window": "only runs with this window", "order": "oldest first (as pollers read) or newest first",
    "page_size": "only runs of this K/V page size (0: contiguous)", "num_pages": "only paged runs of this many pages",
    "ragged": "only ragged runs (true: with seqlens_q or seqlens_kv) or only the others (false)",
}

# Flags of any command that have no help of their own.
FLAG_HELP = {
    "backend": "the variant: a name from attnd-cli variants",
    "wait_timeout": "seconds to wait at most (default: forever)",
}


def _explain_defaults(parser, command=None):
    """Give every flag a help that says its default. A flag without help gets one from the
    tables above (a run parameter: its meaning and the server's default; a list flag of a
    grid says it is an axis); a help that names no default is completed with the value the
    flag falls back to (store_true flags: off). Runs over the subcommands, so that a flag
    added later is covered too; a flag that no table knows keeps no help (the tests say so)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                _explain_defaults(child, command or name)
            continue
        if not action.option_strings or isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
            continue
        if action.help is None:
            if command == "runs" and action.dest in RUNS_FLAG_HELP:
                action.help = RUNS_FLAG_HELP[action.dest] + " (default: %s)" % (
                    "any" if action.default is None else action.default)
            elif action.dest in RUN_PARAM_HELP:
                meaning, default = RUN_PARAM_HELP[action.dest]
                if action.type not in (None, int, float, str, _bool):  # a comma-separated list: an axis
                    meaning = "comma-separated: an axis of the grid; " + meaning
                action.help = "%s (server default: %s)" % (meaning, default)
            elif action.dest in FLAG_HELP:
                action.help = FLAG_HELP[action.dest]
            else:
                continue
        if "default" in action.help or action.required:
            continue
        if isinstance(action, argparse._StoreTrueAction):
            action.help += " (default: off)"
        elif action.default is None and action.dest in RUN_PARAM_HELP and command != "runs":
            action.help += " (server default: %s)" % RUN_PARAM_HELP[action.dest][1]
        elif action.default not in (None, [], argparse.SUPPRESS):
            action.help += " (default: %s)" % (action.default,)
        else:
            action.help += " (default: none)"


# ---- flags on runs: a failed verify, a missed noise target

def _flag_runs(records):
    """Say on stderr which runs failed their verify and which missed their noise target
    (timing.rse above target_noise: their medians are noisier than asked for). Returns the
    ids of the failed verifies: they make the exit status 1."""
    records = [r for r in records if isinstance(r, dict)]
    bad_verify = [r.get("id") for r in records if verify_passed(r) is False]
    noisy = [r.get("id") for r in records if noise_missed(r)]
    for ids, what in ((bad_verify, "verify failed"), (noisy, "noise target missed (timing.rse > target_noise)")):
        if ids:
            sys.stderr.write("attnd-cli: %s: run%s %s\n" % (what, "s" if len(ids) > 1 else "",
                                                          ", ".join(str(i) for i in ids)))
    return bad_verify


SWEEP_RESIDENT_INPUTS = ("q", "k", "v", "block_table")  # always tensor ids
SWEEP_RESIDENT_LENGTHS = ("seqlens_q", "seqlens_kv")     # tensor ids, or lengths a plan holds
TENSOR_ID = re.compile(r"t[0-9]+")


def _resident_inputs(args):
    """--param q=ID, k=ID, v=ID, block_table=ID, seqlens_q=ID, seqlens_kv=ID of a sweep from
    flags: resident tensors of the server the sweep talks to, given to every run of the grid
    and to every study. A plan file cannot hold them (attnd batch has no server's tensors), so
    they are taken out before the grid is checked as a plan; lengths given as a list or a
    distribution stay in the plan."""
    if getattr(args, "plan", None):
        return {}
    resident, rest = {}, []
    for key in SWEEP_RESIDENT_LENGTHS:  # --seqlens-q/--seqlens-kv naming a tensor
        value = getattr(args, key, None)
        if isinstance(value, str) and TENSOR_ID.fullmatch(value):
            resident[key] = value
            setattr(args, key, None)
    for kv in args.param:
        key, _, value = kv.partition("=")
        if key in SWEEP_RESIDENT_INPUTS or (key in SWEEP_RESIDENT_LENGTHS and TENSOR_ID.fullmatch(value)):
            resident[key] = _value(value)
        else:
            rest.append(kv)
    args.param = rest
    return resident


def _quiet_closed_pipe(out):
    """The reader of stdout went away (`| head`): send what is left of the output nowhere,
    so that neither the next write nor the interpreter's last flush raises."""
    if out is sys.stdout:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        except (OSError, ValueError):
            pass


def main(argv=None, out=None):
    out = out or sys.stdout
    args = build_parser().parse_args(argv)
    try:
        if args.cmd == "run":
            return cmd_run(args, out)
        if args.cmd == "sweep":
            return cmd_sweep(args, out)
        if args.cmd in ("cancel", "tensors"):
            return (cmd_cancel if args.cmd == "cancel" else cmd_tensors)(args, out)
        if args.cmd == "plan":
            plan = plan_of_args(args)
            check_plan(plan)  # flags that batch would refuse are refused here
            out.write(json.dumps(plan, indent=1) + "\n")
            return 0
        client = _client(args)
        if args.cmd == "device":
            out.write(json.dumps(client.device(), indent=1) + "\n")
        elif args.cmd == "variants":
            out.write(json.dumps(client.variants(), indent=1) + "\n")
        elif args.cmd == "nodes":
            out.write(json.dumps(client.nodes(), indent=1) + "\n")
        elif args.cmd == "models":
            out.write(format_models(client.models()))
        elif args.cmd == "get":
            out.write(json.dumps(client.get_run(args.id), indent=1) + "\n")
        elif args.cmd == "wait":
            rec = client.wait(args.id, timeout=args.wait_timeout)
            out.write(json.dumps(rec, indent=1) + "\n")
            return 0 if rec.get("status") == "done" else 1
        elif args.cmd == "runs":
            return cmd_runs(args, out)
        elif args.cmd == "study":
            return cmd_study(args, out)
        elif args.cmd == "compare":
            return cmd_compare(args, out)
        return 0
    except AttndError as exc:
        sys.stderr.write("attnd-cli: %s\n" % exc)
        return 1
    except PlanError as exc:
        sys.stderr.write("attnd-cli: plan: %s\n" % exc)
        return 2
    except UsageError as exc:
        sys.stderr.write("attnd-cli: %s\n" % exc)
        return 2
    except BrokenPipeError:
        _quiet_closed_pipe(out)
        return 0
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
