"""bench/builds_ab.py, the A/B of builds a GPU call runs (one variant on each build's server,
alternated, and a reference variant): here with one server standing for two builds on the cpu
device, so the script and the run records it reads stay in step."""
import json
import os
import subprocess
import sys

from attnd_api_helpers import REPO


def test_two_builds_alternated_on_the_cpu(api, tmp_path):
    out = tmp_path / "ab.json"
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "builds_ab.py"), "--build", "head=" + api.url,
                        "--build", "new=" + api.url, "--variant", "reference", "--ref", "", "--device", "cpu",
                        "--rounds", "3", "--min-time-ms", "5", "--shape", "2,4,2,1,64,64",
                        "--shape", "2,4,2,1,64,64,none,16", "--json", str(out)],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    assert "B2 H4/2 Sq1 Skv64 D64 none P16 (3 rounds, min_time_ms 5)" in p.stdout, p.stdout
    assert "| head | " in p.stdout and " | 1.0000 |" in p.stdout, p.stdout
    assert "| bits of head |" in p.stdout, p.stdout
    rec = json.loads(out.read_text())
    assert rec["builds"] == {"head": api.url, "new": api.url} and rec["variant"] == "reference"
    assert [s["shape"].get("page_size") for s in rec["shapes"]] == [None, 16]
    for s in rec["shapes"]:
        assert sorted(s["rounds"]) == ["head", "new"], s
        assert all(len(t) == 3 and min(t) > 0 for t in s["rounds"].values()), s
        # one server stands for both builds: the same inputs give the same bits
        assert s["bits"] == {"head": "same", "new": "same"}, s
        assert len(s["fingerprints"]["head"]) == 1 and s["fingerprints"]["new"] == s["fingerprints"]["head"], s


def test_a_ragged_batch_runs_as_params(api, tmp_path):
    """--params takes a case the shape syntax cannot say: a ragged batch's lengths reach the
    server (its record says ragged, and the real tokens are counted)."""
    out = tmp_path / "ab.json"
    params = {"batch": 3, "heads": 4, "kv_heads": 2, "seq_q": 1, "seqlens_kv": [17, 0, 40], "head_dim": 64}
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "builds_ab.py"), "--build", "head=" + api.url,
                        "--variant", "reference", "--ref", "", "--device", "cpu", "--rounds", "2",
                        "--min-time-ms", "5", "--params", json.dumps(params), "--json", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    assert "ragged 3 sequences, 57 tokens H4/2 D64 causal (2 rounds, min_time_ms 5)" in p.stdout, p.stdout
    rec = json.loads(out.read_text())
    assert rec["shapes"][0]["shape"] == dict(params, dtype="bf16"), rec
    assert len(rec["shapes"][0]["rounds"]["head"]) == 2
    assert len(rec["shapes"][0]["fingerprints"]["head"]) == 1, rec
    runs = api.get("/v1/runs?ragged=true&backend=reference&order=newest&limit=1").json()["runs"]
    assert runs and runs[0]["params"]["seqlens_kv"] == [17, 0, 40], runs


def test_a_case_is_needed():
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "builds_ab.py"), "--build", "head=http://127.0.0.1:9"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "name a case: --shape or --params" in p.stderr, p.stderr


def test_a_reference_that_cannot_run_a_case_leaves_the_builds_compared(api, tmp_path):
    """A case the reference refuses as unsupported (cudnn on the cpu device here; cuDNN's pages
    of 7 on a GPU) still compares the builds: the reason is printed, the table has no
    reference column, and the exit status is 0."""
    out = tmp_path / "ab.json"
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "builds_ab.py"), "--build", "head=" + api.url,
                        "--build", "new=" + api.url, "--variant", "reference", "--ref", "cudnn", "--device", "cpu",
                        "--rounds", "2", "--min-time-ms", "5", "--shape", "2,4,2,1,64,64", "--json", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:])
    assert "cudnn cannot run this case: backend cudnn needs a GPU" in p.stdout, p.stdout
    assert "| row | median us | range | / head | bits of head |" in p.stdout, p.stdout
    assert "| cudnn |" not in p.stdout, p.stdout
    rec = json.loads(out.read_text())["shapes"][0]
    assert sorted(rec["rounds"]) == ["head", "new"] and all(len(t) == 2 for t in rec["rounds"].values()), rec
    assert "needs a GPU" in rec["ref_refused"], rec


def test_a_refused_shape_fails_the_script(api):
    """A run the server refuses on a build's variant is named, and the exit status says so."""
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "builds_ab.py"), "--build", "head=" + api.url,
                        "--variant", "cudnn", "--ref", "", "--device", "cpu", "--rounds", "1",
                        "--min-time-ms", "5", "--shape", "2,4,2,1,64,64"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, (p.stdout[-2000:], p.stderr[-2000:])
    assert p.stdout.startswith("B2 H4/2 Sq1 Skv64 D64 none: unsupported: backend cudnn needs a GPU"), p.stdout


def test_an_implementation_is_asked_for_by_name(api):
    """--variant backend:impl runs that implementation, as a study's variants name one: the
    server's refusal of an impl the reference lacks shows the impl reached it."""
    p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "builds_ab.py"), "--build", "head=" + api.url,
                        "--variant", "reference:splitkv", "--ref", "", "--device", "cpu", "--rounds", "1",
                        "--min-time-ms", "5", "--shape", "2,4,2,1,64,64"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1, (p.stdout[-2000:], p.stderr[-2000:])
    assert p.stdout.startswith("B2 H4/2 Sq1 Skv64 D64 none: bad_value: backend reference has one implementation"), p.stdout


def test_bits_say_differ_and_unknown():
    """The bits column's other words: a build whose output differs, and a run that reported none."""
    sys.path.insert(0, os.path.join(REPO, "bench"))
    from builds_ab import same_bits
    prints = {"head": {"a1"}, "new": {"a1"}, "other": {"b2"}, "mixed": {"a1", "b2"}, "none": {None}}
    assert same_bits(prints, "new", "head") == "same"
    assert same_bits(prints, "other", "head") == "differ"
    assert same_bits(prints, "mixed", "head") == "differ"
    assert same_bits(prints, "head", "mixed") == "differ"  # a base whose own runs disagree
    assert same_bits(prints, "none", "head") == "-"
