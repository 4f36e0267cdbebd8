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


def test_ragged_prefill_as_params(api, tmp_path):
    """--params carries what a shape cannot say: a ragged causal prefill, its TFLOP/s read from
    the run (counted on the real tokens), beside a shape in the same call."""
    out = tmp_path / "ragged.json"
    ragged = dict(heads=4, kv_heads=2, head_dim=32, mask="causal", seqlens_q=[1, 17, 40], seqlens_kv=[1, 17, 40])
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "decode_study.py"), "--url", api.url,
                        "--device", "cpu", "--variants", "reference", "--rounds", "1", "--min-time-ms", "5",
                        "--params", json.dumps(ragged), "--shape", "1,4,2,1,64,32",
                        "--json", str(out)], capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    assert "ragged 3 sequences, 58 tokens H4/2 D32 causal" in p.stdout, p.stdout
    shapes = json.loads(out.read_text())["shapes"]
    assert shapes[1]["shape"]["seqlens_q"] == [1, 17, 40] and shapes[1]["shape"]["dtype"] == "bf16", shapes
    row = shapes[1]["rows"]["reference"]
    assert row["median_us"] > 0 and row["tflops"] > 0, row


def test_params_not_an_object_is_refused(api):
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "decode_study.py"), "--url", api.url,
                        "--params", "[1, 2]"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "a JSON object of run parameters" in p.stderr, (p.stdout, p.stderr)
