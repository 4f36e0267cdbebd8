"""Studies (POST /v1/studies, docs/api.md Studies) and comparisons (GET /v1/compare) with the
real binary on the cpu device, whose one backend is the fp64 `reference`: a study of it runs
its rounds as ordinary runs, stores a record that lists them and sums them up in a row; the
GPU variants a study names by default are refused by name on a machine without a GPU.

The comparisons run on a server of one cpu thread: with two, a forward whose threads wait
for each other on a loaded 2-core machine can take a scheduler tick instead of microseconds,
and no noise model covers that. One thread's runs of one shape mostly stay within a few percent
of each other, about what two runs differ by on a GPU (a VM that steps between speeds for whole
runs aside: the single-run test picks its pair); the single-run comparisons give that as
noise_floor (5%), as the docs say a user of such a machine would, and groups of runs and
studies measure it instead.

Runs that should agree last about a fifth of a second after a warmup (STEADY): a median of
forwards moves only when the machine changes for half a run or more. A run of a few
milliseconds can sit wholly inside one such change (a busy neighbour on the CPU's other thread,
a clock step), and CI's 2-core machine once judged such a pair faster beyond 99.9%.
"""
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from attnd_api_helpers import REPO, Api, check_against_openapi, error_of, store_under_test, tiny

sys.path.insert(0, os.path.join(REPO, "clients", "python"))
from attnd import cli  # noqa: E402

STUDY_WAIT_S = 120
CPU_NOISE_FLOOR = 0.05  # single runs of one cpu thread on a loaded machine (see the module's docstring)
STEADY = {"seq": 128, "head_dim": 16, "warmup": 100, "iters": 1000}  # ~0.2 s a run (see above)
STEADY_LONGER = dict(STEADY, seq=256, iters=250)  # 4x the work a forward, ~0.2 s a run too


@pytest.fixture(scope="module")
def cpu1():
    """A server whose cpu reference runs on one thread (the comparisons': see above)."""
    from attnd_api_helpers import AttndServer

    srv = AttndServer(extra=["--cpu-threads", "1"]).start()
    yield Api(srv.url)
    try:
        srv.stop_checked()
    finally:
        srv.cleanup()


def study_params(**over):
    """A small study of the reference: three rounds of a tiny shape, each run 20 forwards."""
    p = {"variants": ["reference"], "batch": 1, "heads": 2, "seq": 16, "head_dim": 8, "warmup": 0, "iters": 20,
         "device": "cpu"}
    p.update(over)
    return p


def slow_params(**over):
    """A study whose runs take about a second each on the cpu device (to be caught running)."""
    return study_params(**dict({"seq": 128, "head_dim": 16, "iters": 5000, "rounds": 5}, **over))


def post_study(api, **params):
    r = api.post("/v1/studies", json=params, timeout=30)
    assert r.status_code == 202, (r.status_code, r.text[:1000])
    body = r.json()
    assert r.headers["Location"] == "/v1/studies/%d" % body["id"]
    check_against_openapi(body, "StudyQueued")
    return body


def wait_study(api, study_id, timeout=STUDY_WAIT_S):
    deadline = time.monotonic() + timeout
    while True:
        r = api.get("/v1/studies/%d" % study_id, params={"wait": 20}, timeout=40)
        assert r.status_code == 200, r.text[:500]
        rec = r.json()
        if rec["status"] in ("done", "failed", "cancelled"):
            return rec
        assert time.monotonic() < deadline, "study %d still %s" % (study_id, rec["status"])


def wait_running(api, study_id, timeout=60):
    deadline = time.monotonic() + timeout
    while True:
        rec = api.get("/v1/studies/%d" % study_id).json()
        if rec["status"] == "running" and any(run["id"] for run in rec["runs"]):
            return rec
        assert rec["status"] in ("queued", "running") and time.monotonic() < deadline, rec["status"]
        time.sleep(0.1)


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


# ---------------------------------------------------------------------------- studies --

def test_a_study_runs_its_rounds_as_ordinary_runs_and_sums_them_up(api):
    queued = post_study(api, **study_params(tags=["s29"], seed=7))
    assert queued["runs_total"] == 3 and queued["status"] == "queued"
    rec = wait_study(api, queued["id"])
    check_against_openapi(rec, "Study")
    assert rec["status"] == "done" and rec["error"] is None
    assert rec["progress"] == {"done": 3, "failed": 0, "cancelled": 0, "total": 3}
    assert rec["variants"] == ["reference"] and rec["baseline"] == "reference" and rec["rounds"] == 3
    assert rec["tags"] == ["s29"] and rec["params"]["seed"] == 7 and "backend" not in rec["params"]
    assert [r["round"] for r in rec["runs"]] == [1, 2, 3]

    runs = [api.get("/v1/runs/%d" % r["id"]).json() for r in rec["runs"]]
    for run, entry in zip(runs, rec["runs"]):
        check_against_openapi(run, "Run")
        assert run["status"] == "done" and run["study"] == {"id": rec["id"], "variant": "reference",
                                                            "round": entry["round"]}
        assert run["params"]["seed"] == 7 and run["params"]["verify"] is True  # a study verifies by default
        assert run["params"]["tags"] == ["s29"] and entry["median_us"] == run["timing"]["median_us"]
    tagged = api.get("/v1/runs", params={"tag": "s29"}).json()["runs"]
    assert sorted(r["id"] for r in tagged) == sorted(r["id"] for r in runs)

    (row,) = rec["table"]
    medians = [r["timing"]["median_us"] for r in runs]
    assert row["status"] == "done" and row["rounds_done"] == 3 and row["runs"] == [r["id"] for r in runs]
    assert row["median_us"] == pytest.approx(median(medians))
    assert row["min_us"] == min(medians) and row["max_us"] == max(medians)
    assert row["min_us"] <= row["p10_us"] <= row["median_us"] <= row["p90_us"] <= row["max_us"]
    assert row["vs_baseline"] == {"ratio": 1, "low": None, "high": None, "significant": False}
    assert row["host_us"] == pytest.approx(median([r["timing"]["host_us"] for r in runs]))
    assert row["kernels_per_forward"] is None and row["top_kernels"] is None  # the cpu device has no CUPTI
    assert row["energy_why"] and row["joules_per_forward"] is None
    # same inputs every round (one seed): the same output bytes, and the reference agrees
    assert row["deterministic"] is True and row["fingerprint"] == runs[0]["output"]["fingerprint"]
    assert row["verify"]["pass"] is True and row["verify"]["reference"] == "cpu_fp64"
    assert row["verify"]["rel_l2_err"] == max(r["verify"]["rel_l2_err"] for r in runs)
    assert row["same_output_as"] == [] and row["noise_missed"] == 0


def test_a_study_of_gpu_variants_is_refused_naming_the_variant_and_stores_nothing(api):
    before = api.get("/v1/studies", params={"limit": 100}).json()["studies"]
    r = api.post("/v1/studies", params={"seq": 1024}, timeout=30)  # the six, on a machine without a GPU
    assert r.status_code == 503, r.text
    err = error_of(r)
    assert err["code"] == "no_device" and err["message"].startswith("variant naive: ")
    r = api.post("/v1/studies", json=study_params(variants=["reference", "flash:tma"]), timeout=30)
    assert r.status_code == 422, r.text  # device cpu was given: a GPU backend there is unsupported
    assert error_of(r)["code"] == "unsupported" and error_of(r)["message"].startswith("variant flash:tma: ")
    assert api.get("/v1/studies", params={"limit": 100}).json()["studies"] == before


@pytest.mark.parametrize("params,body,status,code,field", [
    ({"backend": "reference"}, None, 400, "unknown_parameter", "backend"),
    ({"impl": "tma"}, None, 400, "unknown_parameter", "impl"),
    ({}, {"async": True}, 400, "unknown_parameter", "async"),
    ({"keep_output": "true"}, None, 400, "unknown_parameter", "keep_output"),
    ({"iterations": "3"}, None, 400, "unknown_parameter", "iterations"),
    ({"variants": "reference,reference"}, None, 400, "bad_value", "variants"),
    ({"variants": "reference,"}, None, 400, "bad_value", "variants"),
    ({"variants": "nosuch"}, None, 400, "unknown_backend", "variants"),
    ({"variants": "reference:fast"}, None, 400, "bad_value", "variants"),
    ({"baseline": "flash"}, None, 400, "bad_value", "baseline"),
    ({"rounds": "0"}, None, 400, "out_of_range", "rounds"),
    ({"rounds": "101"}, None, 400, "out_of_range", "rounds"),
    ({"rounds": "3.0"}, None, 400, "bad_value", "rounds"),
    ({}, {"variants": []}, 400, "bad_value", "variants"),
    ({}, {"variants": [1]}, 400, "bad_value", "variants"),
    ({"seq": "0"}, None, 400, "out_of_range", "seq"),
    ({"seq": "4096", "batch": "8"}, None, 422, "too_costly", ""),
    ({"cache": "cold"}, None, 422, "not_applicable", "cache"),
])
def test_study_refusals_name_the_parameter(api, params, body, status, code, field):
    query = {"variants": "reference", "batch": "1", "heads": "2", "seq": "16", "head_dim": "8", "iters": "2"}
    query.update(params)
    for key in body or {}:  # the query would win
        query.pop(key, None)
    r = api.post("/v1/studies", params=query, json=body, timeout=30)
    assert r.status_code == status, (r.status_code, r.text[:500])
    err = error_of(r)
    assert err["code"] == code and (err["field"] or "") == field, err
    if status == 422:
        assert err["message"].startswith("variant reference: "), err


def test_a_bad_body_is_refused_as_a_run_body_is(api):
    r = api.post("/v1/studies", data=b'{"variants": ["reference"]} junk', timeout=30)
    assert r.status_code == 400 and error_of(r)["code"] == "bad_json"
    r = api.post("/v1/studies", data=b'{"rounds": 2, "rounds": 3}', timeout=30)
    assert r.status_code == 400 and error_of(r)["code"] == "duplicate_parameter"


def test_get_refusals(api):
    assert api.get("/v1/studies/999999999").status_code == 404
    assert error_of(api.get("/v1/studies/x"))["field"] == "id"
    for params in ({"wait": "601"}, {"wait": "-1"}, {"later": "1"}):
        r = api.get("/v1/studies/1", params=params)
        assert r.status_code == 400, (params, r.text)
    for params in ({"limit": "0"}, {"limit": "101"}, {"before": "0"}, {"tag": "a b"}, {"status": "lost"},
                   {"order": "newest"}):
        r = api.get("/v1/studies", params=params)
        assert r.status_code == 400, (params, r.text)
    assert api.request("DELETE", "/v1/studies/999999999").status_code == 404


def test_studies_are_listed_newest_first_by_tag_and_status_a_page_at_a_time(api):
    ids = [post_study(api, **study_params(rounds=1, iters=2, tags=["list29", "t%d" % i]))["id"] for i in range(3)]
    for i in ids:
        wait_study(api, i)
    page = api.get("/v1/studies", params={"tag": "list29", "limit": 2}).json()
    check_against_openapi(page, "StudyPage")
    # a cursor is the study's id with SQLite, its fleet position with PostgreSQL: followed, never computed
    assert [s["id"] for s in page["studies"]] == [ids[2], ids[1]] and page["next_before"] is not None
    rest = api.get("/v1/studies", params={"tag": "list29", "limit": 2, "before": page["next_before"]}).json()
    assert [s["id"] for s in rest["studies"]] == [ids[0]] and rest["next_before"] is None
    assert [s["id"] for s in api.get("/v1/studies", params={"tag": "t1"}).json()["studies"]] == [ids[1]]
    done = api.get("/v1/studies", params={"tag": "list29", "status": "done"}).json()["studies"]
    assert len(done) == 3 and api.get("/v1/studies", params={"tag": "list29", "status": "running"}).json()[
        "studies"] == []


def test_cancel_a_queued_and_a_running_study(start_server):
    srv = start_server(extra=["--cpu-threads", "1"])
    api = Api(srv.url)
    running = post_study(api, **slow_params(tags=["slow"]))
    wait_running(api, running["id"])  # else it may still wait, and the next one queues second
    queued = post_study(api, **study_params())
    assert queued["queue_position"] == 1
    live = api.get("/v1/studies/%d" % queued["id"]).json()
    assert live["status"] == "queued" and live["queue_position"] == 1

    r = api.request("DELETE", "/v1/studies/%d" % queued["id"])
    assert r.status_code == 200, r.text
    rec = r.json()
    check_against_openapi(rec, "Study")
    assert rec["status"] == "cancelled" and rec["error"]["code"] == "cancelled"
    assert [run["status"] for run in rec["runs"]] == ["pending"] * 3 and rec["finished"]

    r = api.request("DELETE", "/v1/studies/%d" % running["id"], timeout=30)
    assert r.status_code == 200, r.text
    rec = wait_study(api, running["id"])
    assert rec["status"] == "cancelled" and rec["error"]["code"] == "cancelled"
    assert 0 < sum(run["id"] is not None for run in rec["runs"]) < 5  # it stopped between its runs
    assert rec["progress"]["done"] + rec["progress"]["cancelled"] < 5
    for run in rec["runs"]:
        if run["id"] is not None:  # a run that had started finished (or was cancelled in its queue)
            assert api.get("/v1/runs/%d" % run["id"]).json()["status"] in ("done", "cancelled")
    r = api.request("DELETE", "/v1/studies/%d" % running["id"])
    assert r.status_code == 409 and error_of(r)["code"] == "not_active"
    # the server goes on: a new study runs
    assert wait_study(api, post_study(api, **study_params(rounds=1))["id"])["status"] == "done"


def test_a_stop_cancels_the_studies_and_a_crash_leaves_them_failed(start_server, tmp_path):
    data = str(tmp_path / "data")
    os.makedirs(data)
    srv = start_server(extra=["--cpu-threads", "1"], data_dir=data)
    api = Api(srv.url)
    running = post_study(api, **slow_params())
    queued = post_study(api, **study_params())
    wait_running(api, running["id"])
    srv.stop_checked()  # SIGTERM: the running study stops after its run, the queued one never runs
    srv = start_server(extra=["--cpu-threads", "1"], data_dir=data)
    api = Api(srv.url)
    for sid in (running["id"], queued["id"]):
        rec = api.get("/v1/studies/%d" % sid).json()
        assert rec["status"] == "cancelled" and rec["error"]["code"] == "shutting_down", rec
    crashed = post_study(api, **slow_params())
    wait_running(api, crashed["id"])
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait(timeout=30)
    srv = start_server(extra=["--cpu-threads", "1"], data_dir=data)
    rec = Api(srv.url).get("/v1/studies/%d" % crashed["id"]).json()
    assert rec["status"] == "failed" and rec["error"]["code"] == "server_restarted", rec


def test_metrics_count_studies(api):
    wait_study(api, post_study(api, **study_params(rounds=1, iters=2))["id"])
    text = api.get("/metrics").text
    done = [line for line in text.splitlines() if line.startswith('attnd_studies_total{status="done"}')]
    assert done and float(done[0].split()[-1]) >= 1
    assert 'attnd_studies{state="queued"}' in text and 'attnd_studies{state="running"}' in text


# ---------------------------------------------------------------------------- compare --

def compare(api, base, run, **params):
    r = api.get("/v1/compare", params=dict(params, base=base, run=run), timeout=30)
    assert r.status_code == 200, r.text[:1000]
    body = r.json()
    check_against_openapi(body, "Comparison")
    return body


def test_two_runs_of_one_shape_show_no_significant_difference(cpu1):
    api = cpu1
    api.run_ok(**tiny(**STEADY))  # the server's first run pays for cold caches and page faults
    # A shared 2-core VM can step between speeds for whole runs (medians of 180 and 276 us at this
    # shape, a quarter of pairs apart), which attnd rightly calls a difference: of four runs, the
    # two of closest medians are the pair of one machine state.
    runs = [api.run_ok(**tiny(**STEADY)) for _ in range(4)]
    a, b = min(((x, y) for i, x in enumerate(runs) for y in runs[i + 1:]),
               key=lambda p: abs(math.log(p[1]["timing"]["median_us"] / p[0]["timing"]["median_us"])))
    # At 95% one pair in twenty differs by chance: 99.9%, as for the groups below.
    body = compare(api, a["id"], b["id"], noise_floor=CPU_NOISE_FLOOR, confidence=0.999)
    (row,) = body["rows"]
    assert row["verdict"] == "no significant difference" and row["significant"] is False
    assert row["low"] < 1 < row["high"] and row["ratio"] == pytest.approx(
        b["timing"]["median_us"] / a["timing"]["median_us"])
    assert row["base"]["runs"] == [a["id"]] and row["run"]["runs"] == [b["id"]]
    assert [w["field"] for w in body["warnings"]] == []  # one build, one machine, one problem
    # the CLI prints the verdict and exits 0
    out = __import__("io").StringIO()
    assert cli.main(["compare", str(a["id"]), str(b["id"]), "--url", api.url, "--noise-floor",
                     str(CPU_NOISE_FLOOR), "--confidence", "0.999"], out=out) == 0
    assert "no significant difference" in out.getvalue(), out.getvalue()


def test_a_longer_sequence_is_significantly_slower_and_named_in_the_warnings(cpu1):
    api = cpu1
    short = api.run_ok(**tiny(seq=16, head_dim=16, iters=50))
    long = api.run_ok(**tiny(seq=256, head_dim=16, iters=50))
    (row,) = compare(api, short["id"], long["id"], noise_floor=CPU_NOISE_FLOOR)["rows"]
    assert row["verdict"] == "slower" and row["significant"] and row["ratio"] > 1 and row["low"] > 1
    body = compare(api, long["id"], short["id"], noise_floor=CPU_NOISE_FLOOR)
    assert body["rows"][0]["verdict"] == "faster" and body["rows"][0]["high"] < 1
    (problem,) = [w for w in body["warnings"] if w["field"] == "problem"]
    assert problem["base"]["seq_q"] == 256 and problem["run"]["seq_q"] == 16 and "seq_kv" in problem["message"]


def test_groups_of_runs_measure_their_own_run_to_run_noise(cpu1):
    api = cpu1
    a, b = [], []
    for i in range(3):  # interleaved ABBAAB, so a change of the machine's load falls on both
        for side in ((a, b) if i % 2 == 0 else (b, a)):
            side.append(api.run_ok(**tiny(**STEADY))["id"])
    # Three runs a side: at 95% one such pair in twenty differs by chance, so a wide interval
    # here; one measured as zero (or from the samples alone) would still fail it.
    body = compare(api, ",".join(map(str, a)), ",".join(map(str, b)), confidence=0.999)
    (row,) = body["rows"]
    assert row["base"]["runs"] == a and row["base"]["df"] == 2 and row["run"]["df"] == 2
    assert row["verdict"] == "no significant difference", row
    # Steady runs here too (see above): two short ones (df 1, t 12.7) once spread past a 4x ratio on CI.
    longer = [api.run_ok(**tiny(**STEADY_LONGER))["id"] for _ in range(3)]
    (row,) = compare(api, ",".join(map(str, a)), ",".join(map(str, longer)))["rows"]
    assert row["verdict"] == "slower" and row["low"] > 1


def test_compare_studies_variant_by_variant(cpu1):
    api = cpu1
    # Two studies run one after the other, so a change of the machine's load falls between them
    # and no pair of equal studies is safe to call equal (CI's VM once made one 5% faster for a
    # whole study). The second does 4x the work a forward, a difference no such change hides;
    # equal groups are judged equal where their runs interleave (the test above).
    one = wait_study(api, post_study(api, **study_params(**STEADY))["id"])
    two = wait_study(api, post_study(api, **study_params(**STEADY_LONGER))["id"])
    # At the default 95%: three rounds a side give t = 4.3 at df 2, where 99.9% (t = 31.6) lets
    # one round 10% off hide even this ratio.
    body = compare(api, "study:%d" % one["id"], "study:%d" % two["id"], noise_floor=CPU_NOISE_FLOOR)
    (row,) = body["rows"]
    assert row["variant"] == "reference" and row["base"]["runs"] == one["table"][0]["runs"]
    assert row["run"]["runs"] == two["table"][0]["runs"]
    assert row["base"]["median_us"] == one["table"][0]["median_us"]
    assert row["run"]["median_us"] == two["table"][0]["median_us"]
    assert row["verdict"] == "slower" and row["low"] > 1, row
    (row,) = compare(api, "study:%d" % two["id"], "study:%d" % one["id"], noise_floor=CPU_NOISE_FLOOR)["rows"]
    assert row["verdict"] == "faster" and row["high"] < 1, row
    single = api.run_ok(**tiny(**STEADY_LONGER))  # steady, as the study's rounds
    (row,) = compare(api, "study:%d:reference" % one["id"], single["id"], noise_floor=CPU_NOISE_FLOOR)["rows"]
    assert row["verdict"] == "slower" and row["base"]["median_us"] == one["table"][0]["median_us"]


def test_compare_refusals(api):
    done = api.run_ok(**tiny())["id"]
    slow = api.post("/v1/runs", json=tiny(seq=128, head_dim=16, iters=5000, **{"async": True}), timeout=30).json()["id"]
    cases = [
        ({"base": "999999999", "run": str(done)}, 404, "not_found", "base"),
        ({"base": str(done), "run": "999999999"}, 404, "not_found", "run"),
        ({"base": str(done), "run": str(slow)}, 409, "not_done", "run"),
        ({"base": str(done)}, 400, "missing_parameter", "run"),
        ({"base": "x", "run": str(done)}, 400, "bad_value", "base"),
        ({"base": "1,,2", "run": str(done)}, 400, "bad_value", "base"),
        ({"base": "study:", "run": str(done)}, 400, "bad_value", "base"),
        ({"base": "study:1", "run": str(done)}, 400, "bad_value", "base"),
        ({"base": "study:999999999", "run": "study:999999999"}, 404, "not_found", "base"),
        ({"base": str(done), "run": str(done), "confidence": "1"}, 400, "out_of_range", "confidence"),
        ({"base": str(done), "run": str(done), "noise_floor": "x"}, 400, "bad_value", "noise_floor"),
        ({"base": str(done), "run": str(done), "alpha": "0.05"}, 400, "unknown_parameter", "alpha"),
    ]
    for params, status, code, field in cases:
        r = api.get("/v1/compare", params=params)
        assert r.status_code == status, (params, r.status_code, r.text)
        err = error_of(r)
        assert (err["code"], err["field"]) == (code, field), (params, err)
    api.request("DELETE", "/v1/runs/%d" % slow)


@pytest.mark.sqlite_only  # it edits attnd.db to stand for runs of another build, GPU and driver
def test_compare_names_what_differs_between_the_runs(start_server):
    srv = start_server(extra=["--cpu-threads", "2"])
    api = Api(srv.url)
    a = api.run_ok(**tiny(iters=20))["id"]
    b = api.run_ok(**tiny(iters=20))["id"]
    db = sqlite3.connect(os.path.join(srv.data_dir, "attnd.db"))
    with db:
        db.execute("UPDATE runs SET record = json_set(record, '$.device.driver', '560.35.03',"
                   " '$.timing.clocks.sm_max_mhz', 1980, '$.library', json('{\"name\":\"cuDNN\",\"version\":\"9.19.0\"}'))"
                   " WHERE id = ?", (a,))
        db.execute("UPDATE runs SET record = json_set(record, '$.build.commit', 'ffffffffffff',"
                   " '$.device.name', 'NVIDIA H100', '$.device.driver', '570.86.10', '$.timing.clocks.sm_max_mhz', 1500,"
                   " '$.library', json('{\"name\":\"cuDNN\",\"version\":\"9.8.0\"}')) WHERE id = ?", (b,))
    db.close()
    body = compare(api, a, b, noise_floor=CPU_NOISE_FLOOR)
    found = {w["field"]: w for w in body["warnings"]}
    assert set(found) == {"commit", "gpu", "driver", "clocks", "library"}, body["warnings"]
    assert found["commit"]["run"] == "ffffffffffff" and found["gpu"]["run"] == "NVIDIA H100"
    assert found["driver"]["base"] == "560.35.03" and found["library"]["run"] == "9.8.0"
    assert body["rows"][0]["verdict"] in ("no significant difference", "slower", "faster")  # compared anyway


# ---------------------------------------------------------------------- CLI and client --

TINY_FLAGS = ["--batch", "1", "--heads", "2", "--head-dim", "8", "--warmup", "0", "--iters", "10"]


def test_cli_study_prints_the_table(api, capsys):
    import io
    import json

    out = io.StringIO()
    assert cli.main(["study", "--url", api.url, "--variants", "reference", "--seq", "16", "--rounds", "2",
                     "--tags", "cli29"] + TINY_FLAGS, out=out) == 0
    head, columns, row = out.getvalue().splitlines()
    assert head.startswith("study ") and ": done, 2 rounds, baseline reference, 2/2 runs done" in head, head
    assert columns.split() == ["variant", "status", "median_us", "p10_p90_us", "vs_baseline", "host_us", "tflops",
                               "verify"], columns
    assert row.startswith("reference") and "1 (baseline)" in row and " pass " in row, row
    sid = int(head.split()[1].rstrip(":"))
    out = io.StringIO()
    assert cli.main(["study", "--url", api.url, "--id", str(sid), "--json"], out=out) == 0
    assert json.loads(out.getvalue())["tags"] == ["cli29"]
    # the six of the study on a machine without a GPU: refused, exit 1, the reason on stderr
    assert cli.main(["study", "--url", api.url, "--seq", "16"] + TINY_FLAGS, out=io.StringIO()) == 1
    assert "no_device" in capsys.readouterr().err


def test_sweeps_end_with_a_summary_over_their_repeats(api, capsys):
    import io

    out = io.StringIO()
    assert cli.main(["sweep", "--url", api.url, "--backends", "reference", "--seq", "8,16", "--repeat", "3",
                     "--no-progress"] + TINY_FLAGS, out=out) == 0
    err = capsys.readouterr().err
    summary = err[err.index("summary, one line per point"):].splitlines()
    assert summary[1].split() == ["point", "done", "median_us", "min_us", "max_us"], summary
    assert len(summary) == 4 and all(" 3/3 " in line for line in summary[2:]), summary
    assert summary[2].startswith("reference batch=1 heads=2 seq=8 head_dim=8"), summary
    # a sweep of studies: one study per point, each printed
    out = io.StringIO()
    assert cli.main(["sweep", "--url", api.url, "--backends", "reference", "--seq", "8,16", "--study", "--rounds", "2",
                     "--no-progress"] + TINY_FLAGS, out=out) == 0
    heads = [line for line in out.getvalue().splitlines() if line.startswith("study ")]
    assert len(heads) == 2 and all(": done, 2 rounds" in h for h in heads), out.getvalue()


def test_client_study_and_compare_take_numpy_numbers(api):
    np = pytest.importorskip("numpy")
    from attnd import Client

    client = Client(api.url)
    rec = client.study(variants=["reference"], batch=np.int64(1), heads=np.int32(2), seq=np.int64(16),
                       head_dim=8, warmup=0, iters=np.int64(10), rounds=np.int64(2), timeout=STUDY_WAIT_S)
    assert rec["status"] == "done" and rec["rounds"] == 2
    accepted = client.study(wait=False, variants="reference", batch=1, heads=2, seq=16, head_dim=8, warmup=0,
                            iters=5, rounds=1)
    assert accepted["location"] == "/v1/studies/%d" % accepted["id"]
    assert client.wait_study(accepted["id"], timeout=STUDY_WAIT_S)["status"] == "done"
    runs = rec["table"][0]["runs"]
    body = client.compare(np.int64(runs[0]), [runs[1]], noise_floor=CPU_NOISE_FLOOR)
    assert body["rows"][0]["base"]["runs"] == [runs[0]] and body["rows"][0]["run"]["runs"] == [runs[1]]
    body = client.compare("study:%d" % rec["id"], "study:%d" % accepted["id"])
    assert body["rows"][0]["variant"] == "reference"
    assert client.studies(limit=1)["studies"][0]["id"] == accepted["id"]
