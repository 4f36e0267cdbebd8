"""The front's memory across a large tensor round trip ("front process memory
stays below 2x the largest single upload"), on the cpu device: a 512 MiB tensor uploaded
with `curl -T` (streamed from the file, as docs/tensors.md says to), downloaded with curl,
compared bit for bit, while the front's peak resident set (VmHWM) and the memfds it holds
are watched. Only the front's pid is read: the workers are separate processes (children),
and the cpu worker holds the tensor itself.

A fresh server, so no earlier test's peak counts; its startup peak is reset away too."""
import json
import shutil
import subprocess
import time

import numpy as np
import pytest

from attnd_api_helpers import MemfdSampler, peak_rss_bytes, reset_peak_rss

MIB = 1 << 20
TENSOR_BYTES = 512 * MIB
CURL_TIMEOUT_S = 120
COMPARE_CHUNK = 16 * MIB


def same_files(a, b):
    """Bit for bit, chunk by chunk (never both files whole in memory)."""
    with open(a, "rb") as fa, open(b, "rb") as fb:
        while True:
            x, y = fa.read(COMPARE_CHUNK), fb.read(COMPARE_CHUNK)
            if x != y:
                return False
            if not x:
                return True


def curl(args):
    r = subprocess.run(["curl", "-sS"] + args, capture_output=True, timeout=CURL_TIMEOUT_S)
    assert r.returncode == 0, "curl %s: exit %d\n%s%s" % (args, r.returncode, r.stdout[:500], r.stderr[:500])
    return r.stdout


def test_front_memory_across_a_512_mib_round_trip(start_server, tmp_path):
    if not shutil.which("curl"):
        pytest.skip("curl is not installed")
    srv = start_server()
    pid = srv.proc.pid
    src, dst = tmp_path / "up.bin", tmp_path / "down.bin"
    np.arange(TENSOR_BYTES // 4, dtype=np.uint32).tofile(str(src))  # every word distinct: order shows
    reset = reset_peak_rss(pid)

    with MemfdSampler(pid) as held:
        t0 = time.monotonic()
        # -T streams the file; --data-binary @file would read all of it into curl first
        # (and curl refuses files of 1 GiB or more that way: "out of memory").
        out = curl(["--fail-with-body", "-X", "POST", "-T", str(src), "-H", "Content-Type: application/octet-stream",
                    "%s/v1/tensors?device=cpu&dtype=fp32&shape=%d" % (srv.url, TENSOR_BYTES // 4)])
        up_s = time.monotonic() - t0
        t = json.loads(out)
        assert t["bytes"] == TENSOR_BYTES and t["device"] == "cpu", t
        t0 = time.monotonic()
        curl(["--fail", "-o", str(dst), "%s/v1/tensors/%s/data?format=raw" % (srv.url, t["id"])])
        down_s = time.monotonic() - t0
    peak = peak_rss_bytes(pid)

    print("512 MiB round trip: up %.2f GB/s, down %.2f GB/s; front VmHWM %.0f MiB (%s), memfds held at most "
          "%.0f MiB, VmRSS + memfds at most %.0f MiB (sampled)"
          % (TENSOR_BYTES / up_s / 1e9, TENSOR_BYTES / down_s / 1e9, peak / MIB,
             "since the reset" if reset else "lifetime: clear_refs refused", held.peak_memfd / MIB,
             held.peak_total / MIB))
    assert dst.stat().st_size == TENSOR_BYTES
    assert same_files(src, dst), "the download differs from the upload"
    assert peak < 2 * TENSOR_BYTES, "front VmHWM %.0f MiB over 2x the %d MiB upload" % (peak / MIB, TENSOR_BYTES // MIB)
    assert held.peak_total < 2 * TENSOR_BYTES, \
        "front VmRSS + memfds %.0f MiB over 2x the upload" % (held.peak_total / MIB)
    r = subprocess.run(["curl", "-sS", "-X", "DELETE", "%s/v1/tensors/%s" % (srv.url, t["id"])],
                       capture_output=True, timeout=10)
    assert r.returncode == 0 and json.loads(r.stdout) == {"deleted": t["id"]}, r.stdout[:300]
