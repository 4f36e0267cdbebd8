#!/usr/bin/env python3
"""Two variants side by side under sustained load, through a running attnd.

fused_check times 20 forwards after 5 warm-ups: a burst, at the boost clock. A user's run
(the server's stopping rule, hundreds of forwards over half a second and more) runs long
enough to meet the board's power limit. This script times variant A and variant B on each
shape with the server's own measurement (min_time_ms windows), alternating the order each
round (AB, BA, AB, ...) so that a drifting clock or temperature falls on both, and prints per
shape the median and range of the rounds, the ratio, TFLOP/s and the clocks and power each
saw.

    python3 bench/ab_sustained.py --url http://127.0.0.1:8080 [--variants flash,cudnn]
        [--rounds 3] [--min-time-ms 500] [--json out.json]
"""
import argparse
import json
import statistics
import sys
import urllib.request

# The shapes of the flash-vs-cuDNN targets (bf16): (batch, heads, seq, head_dim, causal).
SHAPES = [(8, 16, 1024, 64, True), (4, 16, 4096, 64, True), (4, 16, 4096, 128, True), (2, 16, 8192, 128, True),
          (4, 16, 4096, 128, False)]


def post_run(url, params, timeout=300):
    req = urllib.request.Request(url + "/v1/runs", data=json.dumps(params).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return json.loads(r.read())
    except urllib.error.HTTPError as e:
        return json.loads(e.read() or b"{}")


def flops(b, h, s, d, causal):
    f = 4.0 * b * h * s * s * d
    return f / 2 if causal else f


def one(url, variant, shape, min_time_ms):
    b, h, s, d, causal = shape
    rec = post_run(url, {"backend": variant, "device": "cuda:0", "batch": b, "heads": h, "seq": s, "head_dim": d,
                         "dtype": "bf16", "causal": causal, "warmup": 10, "min_time_ms": min_time_ms,
                         "max_time_ms": max(3 * min_time_ms, 2000), "profile": False, "verify": False})
    if rec.get("status") != "done":
        raise SystemExit("%s %r: %s" % (variant, shape, json.dumps(rec.get("error", rec))[:400]))
    t = rec["timing"]
    clocks = t.get("clocks") or {}
    energy = rec.get("energy") or {}
    return {"id": rec["id"], "median_us": t["median_us"], "iters": t.get("iters"),
            "sm_min_mhz": clocks.get("sm_min_mhz"), "sm_max_mhz": clocks.get("sm_max_mhz"),
            "throttled": clocks.get("throttled"), "reasons": clocks.get("event_reasons"),
            "avg_power_w": energy.get("avg_power_w")}


def fmt_range(xs):
    return "%.1f [%.1f–%.1f]" % (statistics.median(xs), min(xs), max(xs))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--variants", default="flash,cudnn")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--min-time-ms", type=int, default=500)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    a, b = args.variants.split(",")
    results = {}
    for rnd in range(args.rounds):
        order = (a, b) if rnd % 2 == 0 else (b, a)
        for shape in SHAPES:
            for v in order:
                r = one(args.url, v, shape, args.min_time_ms)
                results.setdefault((shape, v), []).append(r)
                print("round %d %s %s: %.1f us, %s-%s MHz, %s W" % (rnd + 1, v, shape, r["median_us"], r["sm_min_mhz"],
                                                                    r["sm_max_mhz"], r["avg_power_w"]),
                      file=sys.stderr, flush=True)
    print("| shape (bf16) | %s us [range] | %s us [range] | %s / %s | %s TFLOP/s | SM MHz min %s / %s | W %s / %s |"
          % (a, b, a, b, a, a, b, a, b))
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for shape in SHAPES:
        ra, rb = results[(shape, a)], results[(shape, b)]
        ma = [x["median_us"] for x in ra]
        mb = [x["median_us"] for x in rb]
        bb, hh, ss, dd, causal = shape
        label = "B%d H%d S%d D%d %s" % (bb, hh, ss, dd, "causal" if causal else "none")
        tf = flops(*shape) / (statistics.median(ma) * 1e-6) / 1e12

        def lo(rs, key):
            vals = [x[key] for x in rs if x.get(key) is not None]
            return ("%.0f" % min(vals)) if vals else "–"

        print("| %s | %s | %s | %.2f (worst %.2f) | %.0f | %s / %s | %s / %s |"
              % (label, fmt_range(ma), fmt_range(mb), statistics.median(ma) / statistics.median(mb), max(ma) / min(mb),
                 tf, lo(ra, "sm_min_mhz"), lo(rb, "sm_min_mhz"),
                 lo(ra, "avg_power_w"), lo(rb, "avg_power_w")))
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"shape": list(k[0]), "variant": k[1], "rounds": v} for k, v in results.items()], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
