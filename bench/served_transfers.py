#!/usr/bin/env python3
"""1 GiB tensor transfers through curl, two builds or more in one call, beside what curl reaches.

Each build's attnd is started in turn (rounds AB, BA, …), a tensor of --mib MiB is uploaded to
--device with `curl -T`, then downloaded --downloads times to /dev/null and once to a file in
/dev/shm (curl's writes to the file are curl's cost, not the server's). Per build and round:
upload and download GB/s, and a download's phases from the front's log line (the worker's fill
and the front's send, each with its rate), so a change in rate comes with where the time went.

    python3 bench/served_transfers.py --builds build/base,build/test [--mib 1024] [--rounds 2]
        [--downloads 3] [--device cuda:0] [--json out.json]

Run bench/loopback_ceiling.py in the same call for curl's own rates on the machine.
"""
import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from served_throughput import start, stop  # noqa: E402 (beside this file)

DOWNLOADED_RE = re.compile(r"downloaded \(raw, streamed\).*?filled ([0-9.]+) s .*?sent (\d+) of (\d+) bytes in ([0-9.]+) s")


def curl(args, timeout=300):
    t0 = time.monotonic()
    r = subprocess.run(["curl", "-sS", "--fail-with-body"] + args, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise SystemExit("curl %s: %s %s" % (" ".join(args[-1:]), r.stdout[:300], r.stderr[:300]))
    return time.monotonic() - t0, r.stdout


def one_build(build, config, device, src, n, downloads, files):
    log = tempfile.NamedTemporaryFile(prefix="attnd-transfers-", suffix=".log", delete=False)
    proc, url, data = start(build, config, "cpu" if device == "cpu" else "", "info", log)
    try:
        up_s, out = curl(["-X", "POST", "-T", src, "-H", "Content-Type: application/octet-stream",
                          "%s/v1/tensors?dtype=fp32&shape=%d&device=%s" % (url, n // 4, device)])
        tid = json.loads(out)["id"]
        data_url = "%s/v1/tensors/%s/data?format=raw" % (url, tid)
        nulls = [n / curl(["-o", "/dev/null", data_url])[0] / 1e9 for _ in range(downloads)]
        dst = os.path.join(files, "down.bin")
        to_file = n / curl(["-o", dst, data_url])[0] / 1e9
        if os.path.getsize(dst) != n:
            raise SystemExit("%s: the download to a file has %d of %d bytes" % (build, os.path.getsize(dst), n))
        os.unlink(dst)
    finally:
        stop(proc, data)
        log.close()
    lines = open(log.name, errors="replace").read()
    os.unlink(log.name)
    phases = [(float(m.group(1)), float(m.group(4))) for m in DOWNLOADED_RE.finditer(lines)]
    return {"upload GB/s": round(n / up_s / 1e9, 3),
            "download to /dev/null GB/s": [round(x, 3) for x in nulls],
            "download to a file GB/s": round(to_file, 3),
            "fill s (worker), each download": [f for f, _ in phases],
            "send s (front), each download": [s for _, s in phases]}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builds", required=True, help="comma-separated build folders (attnd and attnd-worker)")
    ap.add_argument("--config-of", action="append", default=[], metavar="BUILD=FILE")
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--downloads", type=int, default=3)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    builds = args.builds.split(",")
    configs = dict(x.split("=", 1) for x in args.config_of)
    n = args.mib << 20
    files = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    rows = []
    try:
        src = os.path.join(files, "up.bin")
        with open(src, "wb") as f:
            f.write(os.urandom(1 << 20) * args.mib)
        for r in range(args.rounds):
            for b in (builds if r % 2 == 0 else builds[::-1]):
                row = dict(build=b, round=r, **one_build(b, configs.get(b), args.device, src, n, args.downloads, files))
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(files, ignore_errors=True)
    print("| build | upload GB/s | download to /dev/null GB/s (median) | to a file | fill s | send s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for b in builds:
        mine = [x for x in rows if x["build"] == b]
        med = lambda key: statistics.median(v for x in mine for v in (x[key] if isinstance(x[key], list) else [x[key]]))
        fills, sends = [v for x in mine for v in x["fill s (worker), each download"]], \
            [v for x in mine for v in x["send s (front), each download"]]
        print("| %s | %.3f | %.3f | %.3f | %s | %s |" % (b, med("upload GB/s"), med("download to /dev/null GB/s"),
              med("download to a file GB/s"), "%.3f" % statistics.median(fills) if fills else "-",
              "%.3f" % statistics.median(sends) if sends else "-"))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
