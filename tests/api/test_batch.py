"""`attnd batch PLAN.json` (server/front/batch/batch.c, docs/plan.md) with the real binary on the cpu
device: the lines it writes, the store it fills, its exit statuses, its stop on SIGTERM, and
that a plan from `attnd-cli plan` runs the grid the sweep flags describe.

The cpu device runs one backend, `reference`, so the grids here vary seq and dtype over it;
a GPU backend stands for a run the device refuses.
"""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from attnd_api_helpers import REPO, HTTP_TIMEOUT_S, Api, attnd_bin, pg_database_for, store_under_test

sys.path.insert(0, os.path.join(REPO, "clients", "python"))
from attnd import cli  # noqa: E402

BATCH_TIMEOUT_S = 120.0
TINY_PARAMS = {"batch": 1, "heads": 2, "head_dim": 8, "warmup": 0, "iters": 1, "verify": True}


def write_plan(tmp_path, plan, name="plan.json"):
    path = tmp_path / name
    path.write_text(plan if isinstance(plan, str) else json.dumps(plan))
    return str(path)


def store_flags(data_dir):
    """--store for the store under test: a fleet database per data_dir, like the servers'."""
    if store_under_test() != "postgresql":
        return []
    return ["--store", pg_database_for(os.path.realpath(str(data_dir)))]


def run_batch(plan_path, data_dir, *extra):
    """attnd batch on the cpu device; returns the CompletedProcess (text)."""
    argv = [attnd_bin(), "batch", plan_path, "--devices", "none", "--data-dir", str(data_dir),
            "--cpu-threads", "2", "--log-level", "warn"] + store_flags(data_dir) + list(extra)
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=BATCH_TIMEOUT_S)


def lines_of(text):
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def grid_plan():
    return {"backends": ["reference"], "seq": [8, 16], "dtype": ["fp32", "bf16"], "params": dict(TINY_PARAMS)}


def test_plan_writes_one_done_record_per_run(tmp_path):
    p = run_batch(write_plan(tmp_path, grid_plan()), tmp_path / "data")
    assert p.returncode == 0, p.stderr
    recs = lines_of(p.stdout)
    assert len(recs) == 4, p.stdout
    # expansion order: seq before dtype, dtype turning fastest
    assert [(r["params"]["seq_q"], r["params"]["dtype"]) for r in recs] == [
        (8, "fp32"), (8, "bf16"), (16, "fp32"), (16, "bf16")]
    for r in recs:
        assert r["status"] == "done", r
        assert r["timing"]["median_us"] > 0
        assert r["verify"]["pass"] is True
    progress = [line for line in p.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 4, p.stderr
    assert progress[0].startswith("[1/4] reference batch=1 heads=2 seq=8 head_dim=8 dtype=fp32")
    assert all("ms median" in line and "eta " in line for line in progress), progress


def test_out_file_gets_the_lines_and_stdout_nothing(tmp_path):
    out = tmp_path / "results.jsonl"
    p = run_batch(write_plan(tmp_path, grid_plan()), tmp_path / "data", "--out", str(out))
    assert p.returncode == 0, p.stderr
    assert p.stdout == ""
    recs = lines_of(out.read_text())
    assert len(recs) == 4 and all(r["status"] == "done" for r in recs)


def test_records_are_in_the_store_a_server_reads(tmp_path, start_server):
    data = tmp_path / "data"
    p = run_batch(write_plan(tmp_path, grid_plan()), data)
    assert p.returncode == 0, p.stderr
    ids = [r["id"] for r in lines_of(p.stdout)]
    srv = start_server(data_dir=str(data))
    r = Api(srv.url).get("/v1/runs?after=0&limit=100", timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 200, r.text
    stored = r.json()["runs"]
    assert [x["id"] for x in stored] == ids
    assert all(x["status"] == "done" for x in stored)


def test_a_refused_run_is_a_line_and_exit_1_after_the_rest(tmp_path):
    plan = {"backends": ["naive", "reference"], "seq": [8, 16], "params": dict(TINY_PARAMS)}
    p = run_batch(write_plan(tmp_path, plan), tmp_path / "data")
    assert p.returncode == 1, p.stderr
    recs = lines_of(p.stdout)
    assert len(recs) == 4
    refused, done = recs[:2], recs[2:]
    for r in refused:  # naive needs a GPU: refused as POST /v1/runs would, nothing stored
        assert r["status"] == "refused" and r["error"]["code"] == "no_device", r
        assert r["params"]["backend"] == "naive" and "id" not in r
    assert [r["status"] for r in done] == ["done", "done"]
    assert "REFUSED: no_device" in p.stderr


def test_a_value_only_the_device_check_refuses_is_a_refusal(tmp_path):
    plan = {"backends": ["reference"], "seq": [8], "params": dict(TINY_PARAMS, graph=True)}
    p = run_batch(write_plan(tmp_path, plan), tmp_path / "data")
    assert p.returncode == 1, p.stderr
    (r,) = lines_of(p.stdout)
    assert r["status"] == "refused" and r["error"]["code"] == "not_applicable" and r["error"]["field"] == "graph"


@pytest.mark.parametrize("plan,names", [
    ('{"backends": ["reference"], ', "not JSON"),
    ({"seq": [8]}, '"backends" is missing'),
    ({"backends": ["reference"], "sequence": [8]}, 'unknown key "sequence"'),
    ({"backends": ["reference"], "params": {"iterations": 3}}, "params.iterations"),
    ({"backends": ["reference"], "params": {"iters": -1}}, "params.iters"),
    ({"backends": ["reference"], "seq": [8], "params": {"seq": 16}}, "params.seq"),
    ({"backends": ["reference"], "params": {"q": "t1"}}, "params.q"),
    ({"backends": ["reference", "no_such_backend"]}, "no_such_backend"),
    ({"backends": ["reference"], "heads": [2.5]}, '"heads"[0]'),
    ({"backends": ["reference"], "repeat": 0}, '"repeat"'),
    # Read as strictly as a request body: a key twice (cJSON would keep the first), anything
    # after the JSON (a NUL and junk, or text), \u0000 (cJSON cuts the string there), and
    # numbers spelled otherwise than a run parameter's.
    ('{"backends": ["reference"], "seq": [8], "seq": [16], "params": %s}' % json.dumps(TINY_PARAMS),
     "the key 'seq' appears twice"),
    ('{"backends": ["reference"], "params": {"iters": 1, "warmup": 0, "iters": 2}}',
     "the key 'iters' appears twice in an object under 'params'"),
    ('{"backends": ["reference"], "params": %s}\0junk' % json.dumps(TINY_PARAMS), "a NUL byte at byte"),
    ('{"backends": ["reference"], "params": %s} {"backends": ["math"]}' % json.dumps(TINY_PARAMS),
     "more than white space after the value"),
    ('{"backends": ["reference"], "params": {"iters\\u0000junk": 1}}', "escaped NUL"),
    ('{"backends": ["reference\\u0000x"]}', "escaped NUL"),
    ('{"backends": ["reference"], "seq": [08]}', "08"),
    ({"backends": ["reference"], "params": dict(TINY_PARAMS, verify=1)}, "params.verify"),
    ({"backends": ["reference"], "params": dict(TINY_PARAMS, iters="+1")}, "params.iters"),
    ('{"backends": ["reference"], "params": {"iters": 1e0, "warmup": 0}}', "params.iters"),
    ('{"backends": ["reference"], "repeat": 1.0}', '"repeat"'),
])
def test_bad_plan_exits_2_naming_it_and_runs_nothing(tmp_path, plan, names):
    data = tmp_path / "data"
    p = run_batch(write_plan(tmp_path, plan), data)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert names in p.stderr, p.stderr
    assert p.stdout == ""
    assert "[1/" not in p.stderr
    assert not data.exists()  # the plan is refused before the store is opened


def test_bad_flags_exit_2(tmp_path):
    plan = write_plan(tmp_path, grid_plan())
    for extra in (["--no-such-flag"], ["--out"]):
        p = run_batch(plan, tmp_path / "data", *extra)
        assert p.returncode == 2 and "attnd batch:" in p.stderr, (extra, p.stderr)
    p = subprocess.run([attnd_bin(), "batch"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 2 and "usage: attnd batch PLAN.json" in p.stderr
    p = subprocess.run([attnd_bin(), "batch", "--help"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "usage: attnd batch" in p.stdout
    # the server's own help names batch too: a user reads `attnd --help` first
    p = subprocess.run([attnd_bin(), "--help"], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0 and "attnd batch PLAN.json" in p.stdout.split("\n\n")[0], p.stdout[:400]


def test_cli_plan_runs_the_grid_the_sweep_flags_describe(tmp_path, capsys):
    flags = ["--backends", "reference", "--seq", "8,16", "--dtype", "bf16,fp32", "--heads", "1,2", "--batch", "1",
             "--head-dim", "8", "--warmup", "0", "--iters", "1", "--causal", "false", "--repeat", "2"]
    assert cli.main(["plan"] + flags) == 0
    plan_text = capsys.readouterr().out
    p = run_batch(write_plan(tmp_path, plan_text), tmp_path / "data")
    assert p.returncode == 0, p.stderr
    ran = [r["params"] for r in lines_of(p.stdout)]
    swept = cli.sweep_grid(cli.build_parser().parse_args(["sweep"] + flags))
    assert len(ran) == len(swept) == 2 * 2 * 2 * 2
    for got, want in zip(ran, swept):
        want = dict(want)
        seq = want.pop("seq")
        assert got["seq_q"] == got["seq_kv"] == seq
        assert {k: got[k] for k in want} == want


def test_sigterm_stops_after_the_current_run_with_143(tmp_path):
    plan = {"backends": ["reference"], "seq": [64], "repeat": 200,
            "params": {"batch": 1, "heads": 2, "head_dim": 16, "warmup": 0, "iters": 0, "min_iters": 1,
                       "min_time_ms": 100, "max_time_ms": 200}}
    out = tmp_path / "results.jsonl"
    argv = [attnd_bin(), "batch", write_plan(tmp_path, plan), "--out", str(out), "--devices", "none",
            "--data-dir", str(tmp_path / "data"), "--log-level", "warn"]
    proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # wait for the second run to be written, then stop it mid-plan
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if out.exists() and out.read_text().count("\n") >= 2:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, stderr
    text = out.read_text()
    assert text.endswith("\n")
    recs = lines_of(text)
    assert 2 <= len(recs) < 200
    assert all(r["status"] == "done" for r in recs)
    assert "stopped by" in stderr


def test_the_new_axes_run_the_grid_the_cli_expands(tmp_path):
    """model, kv_heads, (seq_q, seq_kv) pairs, mask, window, cache and graph as axes: attnd batch
    runs exactly the runs, in exactly the order, of attnd-cli's expansion (the same plan)."""
    plan = {"backends": ["reference"], "model": ["llama-3.1-8b"], "kv_heads": [4, 8], "seq_q_kv": [[4, 8], [8, 8]],
            "mask": ["none", "causal_bottom_right"], "window": [2], "cache": ["hot"], "graph": [False],
            "params": {"batch": 1, "head_dim": 16, "warmup": 0, "iters": 1}, "repeat": 2}
    p = run_batch(write_plan(tmp_path, plan), tmp_path / "data")
    assert p.returncode == 0, p.stderr
    ran = [r["params"] for r in lines_of(p.stdout)]
    want = cli.plan_grid(plan)
    assert len(ran) == len(want) == 2 * 2 * 2 * 2
    for got, w in zip(ran, want):
        assert {k: got[k] for k in w} == w, (got, w)
        assert got["heads"] == 32  # the model's, under its kv_heads axis
    # the summary: one line per point, its two repeats
    summary = p.stderr[p.stderr.index("attnd batch: summary"):].splitlines()[2:]
    assert len(summary) == 8 and all(" 2/2 " in line for line in summary), summary
    assert any("kv_heads=4 mask=none window=2" in line for line in summary), summary


def test_a_page_size_axis_compares_paged_caches_with_the_contiguous_one(tmp_path):
    """page_size as an axis (0: contiguous) beside ragged lengths in params: attnd batch runs the
    CLI's expansion, and every paged run's output is the contiguous run's (the same logical K/V,
    so the same fingerprint: the reference reads each key once, in order, whatever the layout)."""
    plan = {"backends": ["reference"], "seq_q_kv": [[1, 40]], "page_size": [0, 1, 16],
            "params": {"batch": 3, "heads": 4, "kv_heads": 2, "head_dim": 8, "mask": "causal_bottom_right",
                       "seqlens_kv": [40, 0, 17], "warmup": 0, "iters": 1}}
    p = run_batch(write_plan(tmp_path, plan), tmp_path / "data")
    assert p.returncode == 0, p.stderr
    runs = lines_of(p.stdout)
    want = cli.plan_grid(plan)
    assert [r["params"].get("page_size", 0) for r in runs] == [w["page_size"] for w in want] == [0, 1, 16]
    assert all(r["params"]["seqlens_kv"] == [40, 0, 17] for r in runs)
    assert len({r["output"]["fingerprint"] for r in runs}) == 1, [r["output"] for r in runs]
    summary = p.stderr[p.stderr.index("attnd batch: summary"):]
    assert "page_size=16" in summary and "page_size=1 " in summary, summary


def test_a_plan_of_studies_runs_them_interleaved_and_writes_each_study(tmp_path, start_server):
    plan = {"backends": ["reference"], "seq": [8, 16], "study": {"rounds": 2}, "params": dict(TINY_PARAMS)}
    data = tmp_path / "data"
    p = run_batch(write_plan(tmp_path, plan), data)
    assert p.returncode == 0, p.stderr
    lines = lines_of(p.stdout)
    runs = [line for line in lines if "study" not in line or "params" in line]
    studies = [line["study"] for line in lines if "params" not in line]
    assert len(runs) == 4 and len(studies) == 2, p.stdout
    assert [r["params"]["seq_q"] for r in runs] == [w["seq"] for w in cli.plan_grid(plan)] == [8, 8, 16, 16]
    for study, seq in zip(studies, (8, 16)):
        assert study["status"] == "done" and study["params"]["seq_q"] == seq and study["rounds"] == 2
        assert study["table"][0]["rounds_done"] == 2 and study["table"][0]["verify"]["pass"] is True
        assert [r["study"]["id"] for r in runs if r["params"]["seq_q"] == seq] == [study["id"]] * 2
    assert p.stderr.count("study %d (done, 2 rounds)" % studies[0]["id"]) == 1, p.stderr
    # stored where a server reads them
    srv = start_server(extra=["--cpu-threads", "1"], data_dir=str(data))
    listed = Api(srv.url).get("/v1/studies").json()["studies"]
    assert [s["id"] for s in listed] == [studies[1]["id"], studies[0]["id"]]


@pytest.mark.parametrize("plan,names", [
    ({"backends": ["reference"], "seq": [8], "seq_q_kv": [[8, 8]]}, '"seq" and "seq_q_kv"'),
    ({"backends": ["reference"], "seq_q_kv": [[8]]}, '"seq_q_kv"'),
    ({"backends": ["reference"], "seq_q_kv": [[8, 8]], "params": {"seq_kv": 4}}, "params.seq_kv"),
    ({"backends": ["reference"], "graph": ["false"]}, '"graph"'),
    ({"backends": ["flash:tma"], "impl": ["w4"]}, "impl is an axis"),
    ({"backends": ["reference"], "study": {"rounds": 0}}, "study.rounds"),
    ({"backends": ["reference"], "study": {"baseline": "naive"}}, "study.baseline"),
    ({"backends": ["reference"], "study": {"round": 2}}, "study.round"),
    ({"backends": ["reference", "reference"], "study": True}, "named twice"),
    ({"backends": ["reference"], "page_size": [16], "params": {"page_size": 16}}, "params.page_size"),
    ({"backends": ["reference"], "page_size": [16.5]}, '"page_size"'),
    ({"backends": ["reference"], "page_size": []}, '"page_size"'),
])
def test_bad_new_plans_are_refused_alike(tmp_path, plan, names):
    p = run_batch(write_plan(tmp_path, plan), tmp_path / "data")
    assert p.returncode == 2 and names in p.stderr, (p.returncode, p.stderr)
    with pytest.raises(cli.PlanError) as exc:
        cli.plan_grid(plan)
    assert names in str(exc.value), str(exc.value)


def test_a_study_whose_variant_the_device_refuses_is_one_refusal_line(tmp_path):
    plan = {"backends": ["reference", "flash"], "seq": [8, 16], "study": True, "params": dict(TINY_PARAMS, head_dim=64)}
    p = run_batch(write_plan(tmp_path, plan), tmp_path / "data")
    assert p.returncode == 1, p.stderr
    lines = lines_of(p.stdout)
    assert [(line["status"], line["params"]["backend"], line["error"]["code"]) for line in lines] == [
        ("refused", "flash", "no_device")] * 2, p.stdout
    assert "[2/2]" in p.stderr and "(study refused)" in p.stderr, p.stderr
