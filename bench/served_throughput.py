#!/usr/bin/env python3
"""Served throughput of two builds or more, in one call: how many small runs a second each serves.

Each build's attnd is started in turn on a fresh data directory (rounds AB, BA, … or ABC, CBA,
…, so that drift falls on all), loaded by CLIENTS threads that post small runs for SECONDS,
rotating over the variants and three sequence lengths, and stopped. Per build and round: runs
answered per second, errors, and the medians of the records' service phases (where the build
records them: `service.exchange_ms`, `service.worker_ms.total` and each of the worker's phases),
so a change in throughput comes with where the time went. Without and with verify.

    python3 bench/served_throughput.py --builds build/base,build/test [--clients 12]
        [--seconds 15] [--rounds 2] [--variants naive,naive_inplace,math,efficient,flash,cudnn]
        [--config-of build/base=/path/to/that/tree/config/attnd.json] [--json out.json]

A build is a folder with attnd and attnd-worker (scripts/gpu-build.sh); --config-of gives a
build the config file of its own tree (an older build may not read today's). On a machine
without a GPU, --variants reference --device cpu --shape 1,2,16,8 (the tiny cpu runs).
"""
import argparse
import http.client
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

LISTEN_RE = re.compile(r"attnd listening on (http://[^\s]+)")


def start(build, config, device, log_level="warn", stderr=subprocess.DEVNULL):
    """A started attnd of build on a fresh data dir: (process, url, data dir)."""
    data = tempfile.mkdtemp(prefix="attnd-throughput-")
    env = dict(os.environ)
    if config:
        env["ATTND_CONFIG"] = config
    devices = "none" if device == "cpu" else "all"
    proc = subprocess.Popen([os.path.join(build, "attnd"), "--listen", "127.0.0.1:0", "--data-dir", data,
                             "--devices", devices, "--log-level", log_level, "--queue-depth", "256"],
                            stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        m = LISTEN_RE.search(proc.stdout.readline() or "")
        if m:
            url = m.group(1)
            break
        if proc.poll() is not None:
            raise SystemExit("%s/attnd exited before it listened" % build)
    else:
        proc.kill()
        raise SystemExit("%s/attnd did not listen within 60 s" % build)
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # never let its pipe fill
    while time.monotonic() < deadline:
        try:
            if get(url, "/readyz")[0] == 200:
                return proc, url, data
        except OSError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise SystemExit("%s/attnd was not ready within 60 s" % build)


def stop(proc, data):
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
    shutil.rmtree(data, ignore_errors=True)


def get(url, path):
    u = urllib.parse.urlparse(url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    try:
        c.request("GET", path)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def parse_shape(text):
    """B,H,S1:S2:…,D: the runs' batch, heads, sequence lengths (rotated) and head dim."""
    b, h, seqs, d = text.split(",")
    return int(b), int(h), tuple(int(s) for s in seqs.split(":")), int(d)


def load(url, variants, shape, device, verify, clients, seconds):
    """CLIENTS threads posting runs for SECONDS: (runs answered 200, other answers, records)."""
    u = urllib.parse.urlparse(url)
    batch, heads, seqs, head_dim = shape
    stop_at = time.monotonic() + seconds
    lock = threading.Lock()
    done, failed, records = [0], [0], []

    def client(k):
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
        i = k
        while time.monotonic() < stop_at:
            params = {"backend": variants[i % len(variants)], "batch": batch, "heads": heads,
                      "seq": seqs[(i // len(variants)) % len(seqs)], "head_dim": head_dim, "iters": 10, "warmup": 1,
                      "verify": "true" if verify else "false"}
            if device:
                params["device"] = device
            i += clients
            try:
                conn.request("POST", "/v1/runs?" + urllib.parse.urlencode(params))
                r = conn.getresponse()
                body = r.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
                with lock:
                    failed[0] += 1
                continue
            with lock:
                if r.status == 200:
                    done[0] += 1
                    if len(records) < 2000:
                        records.append(json.loads(body))
                else:
                    failed[0] += 1
        conn.close()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done[0] / (time.monotonic() - t0), failed[0], records


def service_medians(records):
    """Medians of the records' service.exchange_ms and service.worker_ms.total; None without."""
    ex = [r["service"]["exchange_ms"] for r in records if isinstance(r.get("service"), dict)]
    wk = [r["service"]["worker_ms"]["total"] for r in records
          if isinstance(r.get("service"), dict) and isinstance(r["service"].get("worker_ms"), dict)]
    return (statistics.median(ex) if ex else None), (statistics.median(wk) if wk else None)


def worker_phase_medians(records):
    """{phase: median ms} over the records' service.worker_ms (checks, alloc, inputs, measure, …):
    where a worker's time per run went; {} for a build that does not record it."""
    phases = {}
    for r in records:
        wk = (r.get("service") or {}).get("worker_ms") if isinstance(r.get("service"), dict) else None
        if isinstance(wk, dict):
            for k, v in wk.items():
                if isinstance(v, (int, float)):
                    phases.setdefault(k, []).append(v)
    return {k: statistics.median(v) for k, v in phases.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builds", required=True,
                    help="two or more build folders, comma-separated: the first is the baseline")
    ap.add_argument("--config-of", action="append", default=[], metavar="BUILD=FILE",
                    help="the config file a build reads (ATTND_CONFIG)")
    ap.add_argument("--variants", default="naive,naive_inplace,math,efficient,flash,cudnn")
    ap.add_argument("--shape", default="2,4,256:384:512,64",
                    help="B,H,S1:S2:…,D: the runs' shape, the sequence lengths rotated (default the small GPU runs)")
    ap.add_argument("--device", default="", help="the runs' device (default: the server's default)")
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--seconds", type=float, default=15.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warm-seconds", type=float, default=2.0, help="load before each measured window, not counted")
    ap.add_argument("--verify", choices=("both", "no", "yes"), default="both",
                    help="the loads without verify, with it, or both "
                         "(with it, the cpu worker's fp64 reference bounds them)")
    ap.add_argument("--json", default=None, help="write the rows here too")
    args = ap.parse_args()
    passes = {"both": (False, True), "no": (False,), "yes": (True,)}[args.verify]
    builds = args.builds.split(",")
    if len(builds) < 2:
        ap.error("--builds takes two folders or more")
    configs = dict(kv.split("=", 1) for kv in args.config_of)
    variants = args.variants.split(",")
    shape = parse_shape(args.shape)
    rows = []
    for verify in passes:
        for rnd in range(args.rounds):
            order = builds if rnd % 2 == 0 else builds[::-1]  # ABC, CBA: drift falls on all
            for build in order:
                proc, url, data = start(build, configs.get(build), args.device)
                try:
                    load(url, variants, shape, args.device, verify, args.clients, args.warm_seconds)
                    rate, failed, records = load(url, variants, shape, args.device, verify, args.clients,
                                                 args.seconds)
                finally:
                    stop(proc, data)
                ex, wk = service_medians(records)
                phases = worker_phase_medians(records)
                rows.append({"build": build, "verify": verify, "round": rnd, "runs_per_s": rate, "failed": failed,
                             "exchange_ms_median": ex, "worker_ms_median": wk, "worker_phase_ms_medians": phases})
                print("%-24s verify=%-5s round %d: %7.1f runs/s, %d failed%s" % (
                    build, verify, rnd, rate, failed,
                    "" if ex is None else ", exchange %.3f ms, worker %.3f ms (medians)" % (ex, wk or 0.0)),
                    file=sys.stderr, flush=True)
                if phases:
                    print("%-24s   worker ms by phase (medians): %s" % (build, ", ".join(
                        "%s %.3f" % (k, v) for k, v in phases.items() if k != "total")), file=sys.stderr, flush=True)
    print("| build | verify | runs/s (median of rounds) | range | vs %s |" % builds[0])
    print("| --- | --- | --- | --- | --- |")
    for verify in passes:
        base = statistics.median(r["runs_per_s"] for r in rows if r["build"] == builds[0] and r["verify"] == verify)
        for build in builds:
            rates = [r["runs_per_s"] for r in rows if r["build"] == build and r["verify"] == verify]
            med = statistics.median(rates)
            print("| %s | %s | %.1f | %.1f–%.1f | %.3f |" % (build, verify, med, min(rates), max(rates),
                                                              med / base if base else float("nan")))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
