"""attnd-cli: run, sweep and inspect attnd from a shell.

    attnd-cli run --backend flash --seq 4096 [--json]
    attnd-cli sweep --backends naive,math --seq 512,1024 --heads 8,16 [--csv out.csv] [--json out.json]
    attnd-cli sweep --plan plan.json                     (the same grid, from a plan file: docs/plan.md)
    attnd-cli plan --backends naive,math --seq 512,1024 [run flags] > plan.json
    attnd-cli run --backend cudnn --model llama-3.1-70b --seq 8192   (a model preset: attnd-cli models)
    attnd-cli device | variants | models | get ID | wait ID
    attnd-cli runs [--order newest] [--limit N] [--backend flash --seq 4096 --tag exp1 …] [--json | --csv]
    attnd-cli runs --follow [--limit N]                  (new runs, and each again until it is final)
    attnd-cli runs --group-by backend,seq_q [filters]    (count, median of medians, min, max per group)

--url (default $ATTND_URL, else http://127.0.0.1:8080), --token (default $ATTND_TOKEN).
Exit status: 0 all went well (a reader that closed the pipe early, as `| head` does,
included); 1 a run failed or was refused; 2 bad usage.
"""
import argparse
import csv
import itertools
import json
import os
import sys
import time

from .client import AttndError, Client

# Run parameters the CLI spells as flags (the rest go through --param KEY=VALUE).
INT_PARAMS = ("batch", "heads", "kv_heads", "seq", "seq_q", "seq_kv", "head_dim", "head_dim_v", "window", "warmup",
              "iters", "min_iters", "max_iters", "seed")
FLOAT_PARAMS = ("min_time_ms", "max_time_ms", "target_noise", "scale")
STR_PARAMS = ("device", "dtype", "mask", "cache", "model", "impl")
BOOL_PARAMS = ("causal", "graph", "verify", "profile")
LIST_PARAMS = ("tags",)

TABLE_COLUMNS = ("id", "backend", "device", "batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "head_dim_v",
                 "window", "dtype", "mask",
                 "status", "median_us", "rse", "tflops", "kernels", "tags", "error")

# The filters of GET /v1/runs the runs command spells as flags (docs/api.md, History).
RUNS_TEXT_FILTERS = ("backend", "status", "device", "node", "since", "tag", "dtype", "mask", "impl", "gpu", "commit")
RUNS_INT_FILTERS = ("batch", "heads", "kv_heads", "seq", "seq_q", "seq_kv", "head_dim", "head_dim_v", "window")
TERMINAL = ("done", "failed", "cancelled")
# --follow prints rows as they come, so its columns have fixed widths (wider cells push on).
FOLLOW_WIDTHS = {"id": 6, "backend": 9, "device": 6, "batch": 5, "heads": 5, "kv_heads": 8, "seq_q": 6, "seq_kv": 6,
                 "head_dim": 8, "head_dim_v": 10, "window": 6, "dtype": 5, "mask": 6, "status": 9, "median_us": 9,
                 "rse": 7, "tflops": 7, "kernels": 7, "tags": 8}


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
    for name in INT_PARAMS:
        if lists and name in ("batch", "heads", "seq", "head_dim"):
            continue
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=int, default=None)
    for name in FLOAT_PARAMS:
        p.add_argument("--" + name.replace("_", "-"), dest=name, type=float, default=None)
    for name in STR_PARAMS:
        if lists and name == "dtype":
            continue
        p.add_argument("--" + name, dest=name, default=None)
    for name in BOOL_PARAMS:
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


def _add_grid(p, required):
    """The grid flags of sweep and plan: the axes, repeat and the fixed run parameters."""
    p.add_argument("--backends", type=_list(str), required=required, help="comma-separated, e.g. naive,math")
    p.add_argument("--seq", type=_list(int), default=None, help="comma-separated sequence lengths")
    p.add_argument("--heads", type=_list(int), default=None)
    p.add_argument("--batch", type=_list(int), default=None)
    p.add_argument("--head-dim", dest="head_dim", type=_list(int), default=None)
    p.add_argument("--dtype", type=_list(str), default=None)
    p.add_argument("--repeat", type=int, default=None, help="run the whole grid this many times over")
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

    p = sub.add_parser("plan", help="print the plan file (docs/plan.md) the sweep flags describe, for attnd batch")
    _add_grid(p, required=True)

    for name, helptext in (("device", "GET /v1/device"), ("variants", "GET /v1/variants"),
                           ("nodes", "GET /v1/nodes: the fleet's nodes"),
                           ("models", "GET /v1/models: the model presets that --model names")):
        p = sub.add_parser(name, help=helptext)
        _add_common(p)
    p = sub.add_parser("get", help="GET /v1/runs/ID")
    _add_common(p)
    p.add_argument("id", type=int)
    p = sub.add_parser("wait", help="wait for an async run to end; print its record")
    _add_common(p)
    p.add_argument("id", type=int)
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
        "dtype": p.get("dtype"),
        "mask": p.get("mask"),
        "status": rec.get("status") or ("refused" if error else None),
        "median_us": timing.get("median_us"),
        "rse": timing.get("rse"),
        "tflops": perf.get("tflops"),
        "kernels": kernels.get("per_forward"),
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


class Progress:
    """A plain progress bar on stderr: redrawn in place on a terminal, one line per step
    otherwise (logs stay readable)."""

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
        line = "[%s] %d/%d %5.1fs %s" % (bar, self.done, self.total, time.monotonic() - self.t0, label)
        if self.tty:
            self.stream.write("\r\x1b[K" + line[:200])
            if self.done == self.total:
                self.stream.write("\n")
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


# ---- plans (docs/plan.md): the sweep grid as a file; attnd batch reads the same format

PLAN_AXES = ("batch", "heads", "seq", "head_dim", "dtype")  # expansion order, after backends
PLAN_KEYS = ("backends",) + PLAN_AXES + ("params", "repeat", "description")
PLAN_REFUSED_PARAMS = ("q", "k", "v", "keep_output", "async")  # a server's session, not a plan's
PLAN_MAX_REPEAT = 1000


class PlanError(ValueError):
    """A plan that attnd batch would refuse (exit 2); the message names the key."""


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
    for key in ("backends",) + PLAN_AXES:
        if key not in plan:
            continue
        values, want_str = plan[key], key in ("backends", "dtype")
        ok = isinstance(values, list) and values and all(
            (isinstance(v, str) and v) if want_str else (isinstance(v, int) and not isinstance(v, bool))
            for v in values)
        if not ok:
            raise PlanError('"%s" must be a non-empty array of %s' % (key, "strings" if want_str else "integers"))
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
        if key in PLAN_AXES and key in plan:
            raise PlanError("params.%s: %s is also an axis of the plan; give it in one place" % (key, key))
        if key in PLAN_REFUSED_PARAMS:
            raise PlanError("params.%s: not in a plan (resident tensors, keep_output and async belong to a "
                            "server's session)" % key)


def plan_grid(plan):
    """The run parameter dicts of a plan, in the order attnd batch runs them: the whole grid
    `repeat` times over; in it backends outermost, then batch, heads, seq, head_dim, dtype."""
    check_plan(plan)
    axes = [("backend", plan["backends"])] + [(name, plan[name]) for name in PLAN_AXES if name in plan]
    grid = []
    for _ in range(plan.get("repeat", 1)):
        for combo in itertools.product(*[values for _, values in axes]):
            p = dict(plan.get("params", {}))
            p.update({name: val for (name, _), val in zip(axes, combo)})
            grid.append(p)
    return grid


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


def sweep_grid(args):
    """The run parameter dicts of a sweep: its --plan file's, or the plan its flags describe."""
    if getattr(args, "plan", None):
        flags = [name for name in ("backends", "repeat") + PLAN_AXES if getattr(args, name) is not None]
        if flags or _run_params(args, axes=PLAN_AXES):
            raise PlanError("--plan holds the whole grid; drop the grid and run flags (%s)"
                            % ", ".join(flags or ["run parameters"]))
        return plan_grid(read_plan(args.plan))
    if not args.backends:
        raise PlanError("sweep needs --backends (or --plan FILE)")
    return plan_grid(plan_of_args(args))


def cmd_sweep(args, out):
    client = _client(args, retry_429=args.retries)
    grid = sweep_grid(args)
    progress = Progress(len(grid), enabled=not args.no_progress)
    rows, results, failures = [], [], 0
    for params in grid:
        label = " ".join("%s=%s" % (k, params[k]) for k in ("backend", "batch", "heads", "seq", "head_dim", "dtype")
                         if k in params)
        try:
            rec = client.run(check=False, **params)
            rows.append(row_of(rec, params))
            results.append({"params": params, "record": rec})
            if rec.get("status") != "done":
                failures += 1
        except AttndError as exc:
            failures += 1
            rows.append(row_of(None, params, "%s: %s" % (exc.code, exc.message)))
            results.append({"params": params, "error": {"status": exc.status, "code": exc.code,
                                                        "message": exc.message, "field": exc.field}})
        progress.step(label)
    out.write(format_table(rows) + "\n")
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
    return 1 if failures else 0


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
    return 0 if rec.get("status") == "done" else 1


# ---- runs: the history (GET /v1/runs)

def _runs_filters(args):
    names = RUNS_TEXT_FILTERS + RUNS_INT_FILTERS
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
