#!/usr/bin/env python3
"""One variant under several builds of attnd, each build's own server on the same GPU, alternated.

A kernel change is judged against the build before it, in the same call, under the server's
stopping rule (sustained, not a burst). Each build runs as its own attnd (they share the card;
the runs are sequential), and every round runs the variant once on each server, then the
reference variant (e.g. cudnn) on the first, in an order that reverses every other round so
that a drifting clock or temperature falls on all of them. Printed per shape: each row's median
of the rounds, its range, its ratio to the first build's and to the reference, and whether its
output's bits are the first build's (every run's inputs come from the same seed): a change meant
to keep the arithmetic (a launch, a load) must say "same". A case the reference cannot run (cuDNN's
pages are powers of 2) is compared without it, its reason printed.

    python3 bench/builds_ab.py --build head=http://127.0.0.1:8081 --build new=http://127.0.0.1:8082
        --shape B,H,Hkv,SQ,SKV,D[,MASK[,PAGE_SIZE]] [--shape ...] [--params JSON ...] [--variant flash[:IMPL]] [--ref cudnn]
        [--rounds 4] [--min-time-ms 300] [--device cuda:0] [--json out.json]
"""
import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "clients", "python"))
from attnd.client import AttndError, Client  # noqa: E402
from decode_study import parse_params, parse_shape, shape_label  # noqa: E402


def parse_build(text):
    name, sep, url = text.partition("=")
    if not sep or not name or not url:
        raise argparse.ArgumentTypeError("build %r: NAME=URL" % text)
    return name, url


def timed(client, variant, params, min_time_ms, device):
    """The run's median us under the server's stopping rule, the kernels it launched, and its
    output's fingerprint."""
    if device:
        params = dict(params, device=device)
    backend, _, impl = variant.partition(":")  # flash:splitkv, as a study names it
    if impl:
        params = dict(params, impl=impl)
    rec = client.run(backend=backend, min_time_ms=min_time_ms, **params)
    table = (rec.get("kernels") or {}).get("table") or []
    return (rec["timing"]["median_us"], [k.get("name", "")[:60] for k in table if k.get("kind") == "kernel"],
            (rec.get("output") or {}).get("fingerprint"))


def same_bits(prints, name, base):
    """"same" when every run of row `name` gave the one fingerprint every run of `base` gave,
    "differ" otherwise, "-" when a run reported none."""
    if None in prints[name] or None in prints[base]:
        return "-"
    return "same" if len(prints[base]) == 1 and prints[name] == prints[base] else "differ"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", action="append", type=parse_build, required=True, help="NAME=URL, the first is the base")
    ap.add_argument("--shape", action="append", type=parse_shape, default=[])
    ap.add_argument("--params", action="append", type=parse_params, default=[],
                    help="a case as a JSON object of run parameters (a ragged batch: seqlens_kv), bf16 unless it names a dtype")
    ap.add_argument("--variant", default="flash", help="a backend, or backend:impl (flash:splitkv)")
    ap.add_argument("--ref", default="cudnn", help="a variant run on the first build's server ('' for none)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--min-time-ms", type=int, default=300)
    ap.add_argument("--device", default=None, help="the runs' device (default: each server's own)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if not args.shape and not args.params:
        ap.error("name a case: --shape or --params")
    clients = [(name, Client(url, timeout=900)) for name, url in args.build]
    rows = [(name, c, args.variant) for name, c in clients]
    if args.ref:
        rows.append((args.ref, clients[0][1], args.ref))
    out, failed = [], 0
    for params in args.shape + args.params:
        label = shape_label(params)
        case_rows, ref_refused = list(rows), None
        times = {name: [] for name, _, _ in rows}
        prints = {name: set() for name, _, _ in rows}
        kernels = {}
        try:
            for rnd in range(args.rounds):
                for name, client, variant in (case_rows if rnd % 2 == 0 else case_rows[::-1]):
                    try:
                        us, names, fp = timed(client, variant, params, args.min_time_ms, args.device)
                    except AttndError as exc:
                        if name != args.ref or exc.code != "unsupported":
                            raise
                        ref_refused = exc.message
                        continue
                    times[name].append(us)
                    prints[name].add(fp)
                    kernels[name] = names
                if ref_refused:
                    case_rows = [r for r in case_rows if r[0] != args.ref]
        except AttndError as exc:
            print("%s: %s: %s" % (label, exc.code, exc.message))
            out.append(dict(shape=params, error=exc.message))
            failed += 1
            continue
        times = {name: t for name, t in times.items() if t}
        prints = {name: fps for name, fps in prints.items() if name in times}
        med = {name: statistics.median(t) for name, t in times.items()}
        base, ref = rows[0][0], args.ref if args.ref in times else ""
        print("\n%s (%d rounds, min_time_ms %d)" % (label, args.rounds, args.min_time_ms))
        if ref_refused:
            print("%s cannot run this case: %s" % (args.ref, ref_refused))
        ref_col = " / %s |" % ref if ref else ""
        print("| row | median us | range | / %s |%s bits of %s |" % (base, ref_col, base))
        print("| --- | --- | --- | --- |%s --- |" % (" --- |" if ref else ""))
        bits = {name: same_bits(prints, name, base) for name, _, _ in case_rows}
        for name, _, _ in case_rows:
            print("| %s | %.1f | %.1f-%.1f | %.4f |%s %s |" % (
                name, med[name], min(times[name]), max(times[name]), med[name] / med[base],
                " %.4f |" % (med[name] / med[ref]) if ref else "", bits[name]))
        for name, _, _ in case_rows:
            print("  %s: %s" % (name, "; ".join(kernels.get(name) or []) or "no kernel table"))
        sys.stdout.flush()
        out.append(dict(shape=params, rounds=times, kernels=kernels, bits=bits,
                        fingerprints={name: sorted(p for p in fps if p) for name, fps in prints.items()},
                        **({"ref_refused": ref_refused} if ref_refused else {})))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(builds=dict(args.build), variant=args.variant, ref=args.ref, shapes=out), f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
