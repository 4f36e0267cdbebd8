"""bench/decode_study.py, the decode comparison a GPU call runs through attnd (each shape one
study, each variant's TB/s against the read ceiling): here on the cpu device with the reference,
a contiguous and a paged shape, so the script and the records it reads stay in step."""
import json
import os
import subprocess
import sys

from attnd_api_helpers import REPO


def test_shapes_as_studies_on_the_cpu(api, tmp_path):
    out = tmp_path / "decode.json"
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "decode_study.py"), "--url", api.url,
                        "--device", "cpu", "--variants", "reference", "--rounds", "2", "--min-time-ms", "5",
                        "--ceiling-tbs", "1.0", "--shape", "2,4,2,1,64,64", "--shape", "2,4,2,1,64,64,none,16",
                        "--json", str(out)], capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    assert "B2 H4/2 Sq1 Skv64 D64 none P16" in p.stdout, p.stdout
    shapes = json.loads(out.read_text())["shapes"]
    assert [s["shape"].get("page_size") for s in shapes] == [None, 16], shapes
    for s in shapes:
        row = s["rows"]["reference"]
        assert len(row["rounds"]) == 2 and row["median_us"] > 0 and row["worst_us"] >= row["median_us"], row
        assert row["tbs"] > 0 and row["of_ceiling"] == row["tbs"] / 1.0, row


def test_cold_cache_reaches_the_runs(api):
    """--cache cold is the run parameter cache=cold: the cpu device has no L2 to flush, and its
    refusal comes back through the script (on a GPU the runs flush before every forward)."""
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "decode_study.py"), "--url", api.url,
                        "--device", "cpu", "--variants", "reference", "--rounds", "1", "--min-time-ms", "5",
                        "--cache", "cold", "--shape", "2,4,2,1,64,64"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, (p.stdout[-2000:], p.stderr[-2000:])
    assert "B2 H4/2 Sq1 Skv64 D64 none cache=cold: not_applicable" in p.stdout, p.stdout
