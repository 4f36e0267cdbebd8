#!/usr/bin/env python3
"""Decode shapes as attnd studies, each variant's bandwidth against the read ceiling.

A decode streams K and V once: its figure of merit is bytes a second. For each shape this posts
one study (POST /v1/studies: the variants alternated over --rounds rounds, each run under the
server's stopping rule with --min-time-ms), then prints per variant the median of the rounds
and the worst round, the ratio to every other variant, the bandwidth (the run's perf.bytes: Q, K,
V and O once, over its median) and its fraction of the read ceiling (bench/read_ceiling.cu,
measured in the same call and passed as --ceiling-tbs).

    python3 bench/decode_study.py --url URL --ceiling-tbs 4.3 [--variants flash,cudnn,flashinfer]
        [--rounds 3] [--min-time-ms 300] [--cache hot|cold] [--json out.json]
        --shape B,H,Hkv,SQ,SKV,D[,MASK[,PAGE_SIZE]] [--shape ...] [--params JSON ...]

--params takes any study's run parameters as one JSON object, for what a shape cannot say: a
ragged prefill's seqlens_q/seqlens_kv, say, beside its dense twin of the same total. Its table
adds TFLOP/s (the run's perf.tflops, counted on the real tokens).

--cache cold flushes L2 before every timed forward. Back to back (hot, the default), a forward
finds in L2 the last tens of MB the one before it read, and how much of that it reuses depends on
the order its CTAs read in; a serving decode reads each layer's cache from memory.

e.g. --shape 64,32,8,1,8192,128 (GQA decode), --shape 64,32,8,1,8192,128,none,16 (its paged twin),
--shape 64,32,8,4,8192,128,causal_bottom_right (speculative decode, 4 query tokens).
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
from attnd.client import AttndError, Client  # noqa: E402


def parse_shape(text):
    """B,H,Hkv,SQ,SKV,D[,MASK[,PAGE_SIZE]] as study parameters."""
    parts = text.split(",")
    if not 6 <= len(parts) <= 8:
        raise argparse.ArgumentTypeError("shape %r: B,H,Hkv,SQ,SKV,D[,MASK[,PAGE_SIZE]]" % text)
    b, h, hkv, sq, skv, d = (int(x) for x in parts[:6])
    params = dict(batch=b, heads=h, kv_heads=hkv, seq_q=sq, seq_kv=skv, head_dim=d, dtype="bf16",
                  mask=parts[6] if len(parts) > 6 else "none")
    if len(parts) > 7 and int(parts[7]) > 0:
        params["page_size"] = int(parts[7])
    return params


def parse_params(text):
    """One study's run parameters as a JSON object; bf16 unless it names a dtype."""
    try:
        params = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError("--params: not JSON: %s" % exc)
    if not isinstance(params, dict):
        raise argparse.ArgumentTypeError("--params: a JSON object of run parameters")
    params.setdefault("dtype", "bf16")
    return params


def shape_label(params):
    """The shape as its table's heading: B64 H32/8 Sq1 Skv8192 D128 none [P16]. A mask left out is
    the server's default, causal (top-left)."""
    mask = params.get("mask") or ("none" if params.get("causal") is False else "causal")
    if "seqlens_q" in params or "seqlens_kv" in params:
        lens = params.get("seqlens_kv") or params.get("seqlens_q")
        if isinstance(lens, list):
            ragged = "ragged %d sequences, %d tokens" % (len(lens), sum(lens))
        elif isinstance(lens, dict):  # a seeded distribution
            ragged = "ragged %s sequences, %s:%s:%s" % (params.get("batch"), lens.get("dist"), lens.get("min"),
                                                      lens.get("max"))
        else:
            ragged = "ragged"
        label = "%s H%s/%s D%s %s" % (ragged, params.get("heads"), params.get("kv_heads", params.get("heads")),
                                      params.get("head_dim"), mask)
        return label + (" P%d" % params["page_size"] if params.get("page_size") else "")
    if not all(k in params for k in ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim")):
        return json.dumps(params, separators=(",", ":"))  # --params that leave some to the server
    label = "B%(batch)d H%(heads)d/%(kv_heads)d Sq%(seq_q)d Skv%(seq_kv)d D%(head_dim)d" % params + " " + mask
    return label + (" P%d" % params["page_size"] if params.get("page_size") else "")


def shape_rows(client, study, ceiling):
    """{variant: {median_us, worst_us, rounds, tbs, of_ceiling}} from a finished study."""
    by_variant = {}
    for run in study.get("runs") or []:
        if run.get("status") == "done" and run.get("median_us"):
            by_variant.setdefault(run["variant"], []).append(run)
    rows = {}
    for variant, runs in by_variant.items():
        times = [r["median_us"] for r in runs]
        rec = client.get_run(runs[0]["id"])
        nbytes = (rec.get("perf") or {}).get("bytes")
        tflops = (rec.get("perf") or {}).get("tflops")
        med = statistics.median(times)
        tbs = nbytes / (med * 1e-6) / 1e12 if nbytes else None
        table = (rec.get("kernels") or {}).get("table") or []
        rows[variant] = dict(median_us=med, worst_us=max(times), rounds=times, tbs=tbs, tflops=tflops,
                             of_ceiling=tbs / ceiling if tbs and ceiling else None, impl_used=rec.get("impl_used"),
                             kernels=["%s (%s us)" % (k.get("name", "")[:80], k.get("gpu_us")) for k in table if k.get("kind") == "kernel"])
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--url", default=os.environ.get("ATTND_URL", "http://127.0.0.1:8080"))
    ap.add_argument("--shape", action="append", type=parse_shape, default=[])
    ap.add_argument("--params", action="append", type=parse_params, default=[],
                    help="one study's run parameters as JSON (a ragged batch, say)")
    ap.add_argument("--variants", default="flash,cudnn,flashinfer")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-time-ms", type=int, default=300)
    ap.add_argument("--ceiling-tbs", type=float, default=None, help="the read ceiling measured in the same call")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--cache", choices=("hot", "cold"), default="hot",
                    help="cold: L2 flushed before every timed forward (the run parameter cache)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if not args.shape and not args.params:
        ap.error("give at least one --shape or --params")
    client = Client(args.url, timeout=900)
    variants = [v for v in args.variants.split(",") if v]
    out, failed = [], 0
    for params in args.shape + args.params:
        label = shape_label(params)
        if args.cache == "cold":
            label += " cache=cold"
        try:
            study = client.study(wait=True, variants=variants, rounds=args.rounds, device=args.device,
                                 min_time_ms=args.min_time_ms, cache=args.cache, **params)
        except AttndError as exc:
            print("%s: %s: %s" % (label, exc.code, exc.message))
            out.append(dict(shape=params, error=exc.message))
            failed += 1
            continue
        rows = shape_rows(client, study, args.ceiling_tbs)
        out.append(dict(shape=params, study=study.get("id"), rows=rows))
        print("\n%s (study %s, %s)" % (label, study.get("id"), study.get("status")))
        print("| variant | median us | worst round us | TB/s | of ceiling | TFLOP/s | " +
              " | ".join("/ %s" % v for v in variants) + " |")
        print("| --- | --- | --- | --- | --- | --- | " + " | ".join("---" for _ in variants) + " |")
        for v in variants:
            r = rows.get(v)
            if not r:
                err = next((row.get("error") for row in study.get("table") or [] if row.get("variant") == v), None)
                print("| %s | failed: %s |" % (v, (err or {}).get("message", "no run done")))
                failed += 1
                continue
            ratios = ["%.3f" % (r["median_us"] / rows[o]["median_us"]) if o in rows else "-" for o in variants]
            print("| %s (%s) | %.1f | %.1f | %s | %s | %s | %s |" % (
                v, r["impl_used"] or "-", r["median_us"], r["worst_us"],
                "%.2f" % r["tbs"] if r["tbs"] else "-", "%.3f" % r["of_ceiling"] if r["of_ceiling"] else "-",
                "%.1f" % r["tflops"] if r["tflops"] else "-", " | ".join(ratios)))
        for v in variants:  # what each launched, with its time in the profiled forward: a split decode shows its merge kernel
            if rows.get(v):
                print("  %s: %s" % (v, "; ".join(rows[v]["kernels"]) or "no kernel table"))
        sys.stdout.flush()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(ceiling_tbs=args.ceiling_tbs, cache=args.cache, shapes=out), f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
