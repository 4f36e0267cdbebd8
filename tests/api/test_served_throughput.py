"""bench/served_throughput.py, the served-throughput A/B that scripts/gpu-session.sh runs on the
GPU: here with the binary under test as three builds, on the cpu device, for a second a window.
Each build serves runs, the table compares them, and the JSON rows carry the service medians
and the worker's phases."""
import json
import os
import subprocess
import sys

from attnd_api_helpers import REPO, attnd_bin


def test_builds_compared_on_the_cpu(tmp_path):
    build = os.path.dirname(attnd_bin())
    out = tmp_path / "rows.json"
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "served_throughput.py"),
                        "--builds", "%s,%s/.,%s/./." % (build, build, build), "--variants", "reference", "--device", "cpu",
                        "--shape", "1,2,8:16,8", "--clients", "2", "--seconds", "1", "--rounds", "1",
                        "--warm-seconds", "0.2", "--json", str(out)],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    table = [ln for ln in p.stdout.splitlines() if ln.startswith("| ") and not ln.startswith("| build")]
    assert len(table) == 7, p.stdout  # the rule and 3 builds × (without, with verify)
    rows = json.loads(out.read_text())
    assert len(rows) == 6 and all(r["runs_per_s"] > 0 and r["failed"] == 0 for r in rows), rows
    assert all(r["exchange_ms_median"] > 0 and r["worker_ms_median"] > 0 for r in rows), rows
    assert all({"checks", "inputs", "measure", "total"} <= set(r["worker_phase_ms_medians"]) for r in rows), rows
    assert "worker ms by phase (medians): " in p.stderr and " measure " in p.stderr, p.stderr[-2000:]
