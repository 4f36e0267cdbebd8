"""bench/served_transfers.py, the transfer A/B that scripts/gpu-session.sh runs on the GPU: here
with the binary under test as two builds, on the cpu device, with a 16 MiB tensor (a streamed
download). Each build uploads and downloads, the table compares them, and the JSON rows carry
each download's fill and send, read from the front's log line."""
import json
import os
import subprocess
import sys

from attnd_api_helpers import REPO, attnd_bin


def test_builds_compared_on_the_cpu(tmp_path):
    build = os.path.dirname(attnd_bin())
    out = tmp_path / "rows.json"
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "served_transfers.py"),
                        "--builds", "%s,%s/." % (build, build), "--device", "cpu", "--mib", "16", "--rounds", "1",
                        "--downloads", "2", "--json", str(out)],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    table = [ln for ln in p.stdout.splitlines() if ln.startswith("| ") and not ln.startswith("| build")]
    assert len(table) == 3, p.stdout  # the rule and 2 builds
    rows = json.loads(out.read_text())
    assert len(rows) == 2, rows
    for r in rows:
        assert r["upload GB/s"] > 0 and r["download to a file GB/s"] > 0, r
        assert len(r["download to /dev/null GB/s"]) == 2 and min(r["download to /dev/null GB/s"]) > 0, r
        # three streamed downloads (two to /dev/null, one to a file), each with its log line
        assert len(r["fill s (worker), each download"]) == 3, r
        assert all(s > 0 for s in r["send s (front), each download"]), r
