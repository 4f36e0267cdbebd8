#!/usr/bin/env python3
"""bench/loopback_ceiling.py — what curl alone reaches through loopback on this machine, so
attnd's tensor transfer rates (tests/gpu/test_tensors.py, its 1 GB/s target) can be
read against the machine rather than in a vacuum.

Two minimal servers, each doing the least work an HTTP server can: the sink answers a
POST after reading it into a reused 1 MiB buffer (no copy out, no store), the source
answers a GET with sendfile from the file (no copy through user space). curl is run
exactly as the attnd test runs it (-T FILE for uploads; -o FILE, files in /dev/shm where
there is one, and -o /dev/null for downloads: writing the file is part of curl's cost, and
on these VMs the larger part). attnd does strictly more than these servers (it stores the
upload in a memfd, then the worker copies it to the GPU), so its rates should sit below
these. On the H200 machine (16 cores): upload 2.36 GB/s, download 1.50 GB/s (medians of 3,
bench/results/nvidia-h200/2026-12-02-0dc0055-loopback-ceiling.md).

    python3 bench/loopback_ceiling.py [--mib 1024] [--repeats 3]

Prints one JSON object: each repeat's GB/s and the medians.
"""
import argparse
import http.server
import json
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import threading
import time


class CeilingHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    source_path = None

    def log_message(self, *args):
        pass

    def do_POST(self):  # the sink: read and drop
        left = int(self.headers.get("Content-Length", "0"))
        buf = bytearray(1 << 20)
        view = memoryview(buf)
        if self.headers.get("Expect", "").lower() == "100-continue":
            self.send_response_only(100)
            self.end_headers()
        while left > 0:
            n = self.rfile.readinto(view[: min(left, len(buf))])
            if n == 0:
                break
            left -= n
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    def do_GET(self):  # the source: sendfile, or /copy/N: pread into an N-byte buffer, then send
        size = os.path.getsize(self.source_path)
        block = int(self.path.rsplit("/", 1)[1]) if self.path.startswith("/copy/") else 0
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        self.wfile.flush()
        with open(self.source_path, "rb") as f:
            sent = 0
            if block:  # as a server's content reader does (libmicrohttpd's callback responses)
                buf = bytearray(block)
                view = memoryview(buf)
                while sent < size:
                    got = os.preadv(f.fileno(), [view[: min(block, size - sent)]], sent)
                    self.connection.sendall(view[:got])
                    sent += got
            while sent < size:
                sent += os.sendfile(self.connection.fileno(), f.fileno(), sent, size - sent)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--copy-blocks", default="",
                    help="comma-separated block sizes in KiB: downloads to /dev/null from a source that "
                         "preads each block into a buffer and sends it (what copying through user space costs)")
    args = ap.parse_args()
    n = args.mib << 20
    files = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        src, dst = os.path.join(files, "up.bin"), os.path.join(files, "down.bin")
        with open(src, "wb") as f:
            f.write(os.urandom(1 << 20) * args.mib)
        CeilingHandler.source_path = src
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), CeilingHandler)
        server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = "http://127.0.0.1:%d/" % server.server_address[1]
        ups, downs, nulls = [], [], []
        for _ in range(args.repeats):
            t0 = time.monotonic()
            subprocess.run(["curl", "-sS", "--fail", "-X", "POST", "-T", src, "-o", "/dev/null", url], check=True)
            ups.append(n / (time.monotonic() - t0) / 1e9)
            t0 = time.monotonic()
            subprocess.run(["curl", "-sS", "--fail", "-o", dst, url], check=True)
            downs.append(n / (time.monotonic() - t0) / 1e9)
            if os.path.getsize(dst) != n:
                raise SystemExit("download short: %d of %d bytes" % (os.path.getsize(dst), n))
            t0 = time.monotonic()
            got = subprocess.run(["curl", "-sS", "--fail", "-o", "/dev/null", "-w", "%{size_download}", url],
                                 check=True, capture_output=True, text=True).stdout
            nulls.append(n / (time.monotonic() - t0) / 1e9)
            if int(got) != n:
                raise SystemExit("download to /dev/null short: %s of %d bytes" % (got, n))
        copies = {}
        for kib in [int(x) for x in args.copy_blocks.split(",") if x]:
            rates = copies.setdefault("curl download to /dev/null, pread+send of %d KiB blocks GB/s" % kib, [])
            for _ in range(args.repeats):
                t0 = time.monotonic()
                subprocess.run(["curl", "-sS", "--fail", "-o", "/dev/null", url + "copy/%d" % (kib << 10)], check=True)
                rates.append(round(n / (time.monotonic() - t0) / 1e9, 3))
        server.shutdown()
        print(json.dumps({"mib": args.mib, "cpus": os.cpu_count(),
                          "curl upload to a recv-only sink GB/s": [round(x, 3) for x in ups],
                          "curl download from a sendfile source GB/s": [round(x, 3) for x in downs],
                          "curl download from a sendfile source to /dev/null GB/s": [round(x, 3) for x in nulls],
                          "median upload GB/s": round(statistics.median(ups), 3),
                          "median download GB/s": round(statistics.median(downs), 3),
                          "median download to /dev/null GB/s": round(statistics.median(nulls), 3), **copies}, indent=1))
    finally:
        shutil.rmtree(files, ignore_errors=True)


if __name__ == "__main__":
    main()
