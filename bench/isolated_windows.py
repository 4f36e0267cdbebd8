#!/usr/bin/env python3
"""Kernel configurations one at a time under sustained load, with the board's power and clock.

fused_check's interleaved windows (--window-ms with several variants) time each variant right
after another one heated the card, and the order leaves a bias of a few percent (the key-walk
rows of docs/performance.md: 2-3% interleaved, 0.3% alone). Here each variant runs alone for a
long window, nvidia-smi samples the board every 50 ms meanwhile, and the report gives per
variant the time per forward, the power drawn, the SM clock and the energy per forward. At the
power cap, time = cycles / the clock the cap allows: the clock column says which of the two a
difference comes from. The order of the variants reverses every other round.

    python3 bench/isolated_windows.py --fused-check build/gpu/fused_check
        --shape 4,16,4096,128,none --variants flash@tma,cudnn [--cudnn DIR]
        (a variant written OTHER_BUILD/fused_check:flash@tma runs that row of another build)
        [--rounds 2] [--window-ms 3000] [--json out.json] [--smi-log file]
"""
import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SMI_FIELDS = "timestamp,{power},clocks.sm,temperature.gpu"


def power_field():
    """power.draw.instant where the driver has it (power.draw is a 1 s average on recent ones)."""
    probe = subprocess.run(["nvidia-smi", "--query-gpu=power.draw.instant", "--format=csv,noheader"],
                           capture_output=True, text=True)
    return "power.draw.instant" if probe.returncode == 0 else "power.draw"


def read_samples(path):
    """(epoch seconds, W, MHz, degC) per nvidia-smi line; lines that do not parse are skipped."""
    samples = []
    with open(path) as f:
        for line in f:
            p = [x.strip() for x in line.split(",")]
            try:
                t = datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                samples.append((t, float(p[1]), float(p[2]), float(p[3])))
            except (ValueError, IndexError):
                continue
    return samples


def fused_check_us(stdout, variant):
    """The mean us per forward fused_check printed for `variant` (its markdown row)."""
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 8 and cells[6] == variant:
            return float(cells[7])
    return None


def why_no_row(out, row, cudnn_given):
    """A line saying why fused_check timed no `row`: its error, or that it refused the row
    (the cudnn row is refused without --cudnn)."""
    last = (out.stderr.strip() or out.stdout.strip() or "nothing printed").splitlines()[-1][:160]
    return "no %s row (refused%s); last line: %s" % (row, ", no --cudnn given" if row == "cudnn" and not cudnn_given else "", last)


def window_means(samples, end, window_s):
    """Means over the timed window's samples: it ends when fused_check exits; the first 7% and
    the last 0.1 of it are left out (the clock settling, the teardown)."""
    inside = [s for s in samples if end - 0.93 * window_s <= s[0] <= end - 0.1 * window_s]
    if not inside:
        return None
    return {"W": statistics.mean(s[1] for s in inside), "MHz": statistics.mean(s[2] for s in inside),
            "degC": statistics.mean(s[3] for s in inside), "samples": len(inside)}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fused-check", default="build/gpu/fused_check")
    ap.add_argument("--shape", required=True,
                    help="B,H,S,D,MASK[,Hkv[,W[,Dv]]] (fused_check --shape; S may be Sq:Skv for a decode)")
    ap.add_argument("--variants", required=True,
                    help="fused_check row names, comma-separated; the first is the baseline; BINARY:row takes"
                         " the row from another fused_check build (two builds side by side)")
    ap.add_argument("--cudnn", help="cuDNN library directory, for the cudnn row")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--window-ms", type=int, default=3000)
    ap.add_argument("--json", help="write every measurement here")
    ap.add_argument("--smi-log", help="keep nvidia-smi's samples in this file")
    args = ap.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    window_s = args.window_ms / 1000.0

    if args.smi_log:
        smi_path = args.smi_log
    else:
        fd, smi_path = tempfile.mkstemp(suffix=".csv")
        os.close(fd)
    with open(smi_path, "w") as smi_out:
        smi = subprocess.Popen(["nvidia-smi", "--query-gpu=" + SMI_FIELDS.format(power=power_field()),
                                "--format=csv,noheader,nounits", "-lms", "50"], stdout=smi_out,
                               stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    runs = []
    try:
        for r in range(args.rounds):
            for v in (variants if r % 2 == 0 else variants[::-1]):
                binary, row = v.rsplit(":", 1) if ":" in v else (args.fused_check, v)
                cmd = [binary, "--timing-only", "--shape", args.shape, "--repeats", "1", "--window-ms",
                       str(args.window_ms), "--only", row]
                if args.cudnn:
                    cmd += ["--cudnn", args.cudnn]
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=120 + 2 * window_s)
                us = fused_check_us(out.stdout, row)
                runs.append({"variant": v, "round": r + 1, "end": time.time(), "rc": out.returncode, "us": us,
                             "fail": "FAIL" in out.stdout,
                             # fused_check's last words, so a row without a timing says why
                             "why": None if us is not None else why_no_row(out, row, bool(args.cudnn))})
    finally:
        time.sleep(0.2)
        smi.terminate()
        smi.wait()
    samples = read_samples(smi_path)
    for run in runs:
        run.update(window_means(samples, run["end"], window_s) or {})
        if run["us"] is not None and "W" in run:
            run["mJ"] = run["W"] * run["us"] * 1e-3

    print(f"| {args.shape} | round | us per forward | board W | SM MHz | degC | mJ per forward |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for run in runs:
        if run["us"] is None or run["rc"] != 0 or run["fail"]:
            print(f"| {run['variant']} | {run['round']} | no timing (rc {run['rc']}{', FAIL' if run['fail'] else ''}:"
                  f" {run.get('why') or ''}) | | | | |")
        elif "W" not in run:
            print(f"| {run['variant']} | {run['round']} | {run['us']:.1f} | no samples | | | |")
        else:
            print(f"| {run['variant']} | {run['round']} | {run['us']:.1f} | {run['W']:.0f} | {run['MHz']:.0f} |"
                  f" {run['degC']:.0f} | {run['mJ']:.0f} |")
    base = [x["us"] for x in runs if x["variant"] == variants[0] and x["us"]]
    print()
    for v in variants:
        us = [x["us"] for x in runs if x["variant"] == v and x["us"]]
        mhz = [x["MHz"] for x in runs if x["variant"] == v and "MHz" in x]
        if us and base:
            line = f"{v}: median {statistics.median(us):.1f} us [{min(us):.1f}-{max(us):.1f}]," \
                   f" {statistics.median(us) / statistics.median(base):.3f} of {variants[0]}"
            if mhz:
                line += f", {statistics.median(mhz):.0f} MHz"
            print(line)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": args.shape, "window_ms": args.window_ms, "runs": runs}, f, indent=1)
    if not args.smi_log:
        os.unlink(smi_path)
    return 0 if all(x["us"] is not None and x["rc"] == 0 and not x["fail"] for x in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
