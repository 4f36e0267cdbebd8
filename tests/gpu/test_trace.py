"""GET /v1/runs/ID/trace on a GPU: the Chrome trace-event JSON of the profiled forward, as
Perfetto and chrome://tracing open it: a CPU process with the NVTX ranges and the launching
API calls, a GPU process (named after the device) with kernels, memcpys and memsets per
stream, and one flow arrow from each launch to its GPU activity."""
import json

from attnd_api_helpers import AttndServer
from attnd_gpu_helpers import GpuApi, error_of, fact, fresh_seed

SHAPE = dict(batch=2, heads=4, seq=256, head_dim=64, dtype="bf16", mask="causal", warmup=1, iters=3)


def lanes(events):
    out = {}
    for e in events:
        if e["ph"] == "X":
            out.setdefault((e["pid"], e["tid"]), []).append(e)
    return out


def validate_trace(trace, rec, want_nvtx=False):
    assert isinstance(trace, dict) and isinstance(trace.get("traceEvents"), list), trace.keys()
    evs = trace["traceEvents"]
    json.dumps(trace)  # serialisable as is
    for e in evs:
        assert e["ph"] in ("X", "M", "s", "f"), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        if e["ph"] in ("X", "s", "f"):
            assert e["ts"] >= 0, e
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["cat"] and e["name"], e
    procs = {e["pid"]: e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "process_name"}
    assert set(procs) == {0, 1}, procs
    assert procs[1] == rec["device"]["name"], (procs, rec["device"].get("name"))
    named = {(e["pid"], e["tid"]) for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    by_lane = lanes(evs)
    assert set(by_lane) <= named, "every lane is named: %s vs %s" % (sorted(by_lane), sorted(named))

    cats = {}
    for e in evs:
        if e["ph"] == "X":
            cats.setdefault(e["cat"], []).append(e)
    k = rec["kernels"]
    assert len(cats.get("kernel", [])) == k["per_forward"], (len(cats.get("kernel", [])), k["per_forward"])
    assert len(cats.get("gpu_memcpy", [])) + len(cats.get("gpu_memset", [])) == k["memops_per_forward"]
    assert cats.get("cuda_api"), "no launching API calls"
    if want_nvtx:
        assert cats.get("user_annotation"), "no NVTX ranges (the server runs with nvtx_to_cupti true)"
    for cat in ("kernel", "gpu_memcpy", "gpu_memset"):
        assert all(e["pid"] == 1 for e in cats.get(cat, [])), cat
    for cat in ("cuda_api", "user_annotation"):
        assert all(e["pid"] == 0 for e in cats.get(cat, [])), cat

    # Nesting on the CPU lanes (Chrome drops what overlaps without nesting); 1 ns slack.
    for (pid, tid), xs in by_lane.items():
        if pid != 0:
            continue
        xs = sorted(xs, key=lambda e: (e["ts"], -e["dur"]))
        stack = []
        for e in xs:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"] + 1e-3:
                stack.pop()
            if stack:
                assert e["ts"] + e["dur"] <= stack[-1]["ts"] + stack[-1]["dur"] + 1e-3, \
                    "%s overlaps %s without nesting" % (e["name"], stack[-1]["name"])
            stack.append(e)

    # Flows: each GPU activity has one s/f pair; s inside a cuda_api slice on pid 0.
    starts = {e["id"]: e for e in evs if e["ph"] == "s"}
    ends = {e["id"]: e for e in evs if e["ph"] == "f"}
    assert set(starts) == set(ends), "unpaired flows"
    gpu = [e for c in ("kernel", "gpu_memcpy", "gpu_memset") for e in cats.get(c, [])]
    assert len(ends) >= len({e["args"]["correlation"] for e in gpu}) > 0
    apis = cats["cuda_api"]
    for fid, s in starts.items():
        f = ends[fid]
        assert s["pid"] == 0 and f["pid"] == 1 and f.get("bp") == "e", (s, f)
        assert any(a["tid"] == s["tid"] and a["ts"] - 1e-3 <= s["ts"] <= a["ts"] + a["dur"] + 1e-3 for a in apis), s
        assert any(g["tid"] == f["tid"] and abs(g["ts"] - f["ts"]) < 1e-3 for g in gpu), f
    return len(evs)


def test_trace_of_profiled_gpu_run(gapi):
    rec = gapi.run_ok(backend="math", seed=fresh_seed(), profile="true", **SHAPE)
    assert "trace" not in rec, "the trace is kept apart from the record"
    r = gapi.get("/v1/runs/%d/trace" % rec["id"])
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json"), r.text[:300]
    n = validate_trace(r.json(), rec)
    fact("trace events (math, small shape)", n)
    assert "trace" not in gapi.get("/v1/runs/%d" % rec["id"]).json()


def test_no_trace_without_profile(gapi):
    rec = gapi.run_ok(backend="math", seed=fresh_seed(), profile="false", **SHAPE)
    r = gapi.get("/v1/runs/%d/trace" % rec["id"])
    assert r.status_code == 404 and error_of(r)["code"] == "no_trace", r.text


def test_async_gpu_run_keeps_its_trace(gapi):
    import time
    r = gapi.run(params=dict(SHAPE, backend="naive", device="cuda:0", seed=fresh_seed(), profile="true",
                             **{"async": "true"}))
    assert r.status_code == 202, r.text
    rid = r.json()["id"]
    deadline = time.monotonic() + 120
    while True:
        rec = gapi.get("/v1/runs/%d" % rid).json()
        if rec["status"] in ("done", "failed", "cancelled"):
            break
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert rec["status"] == "done", rec
    validate_trace(gapi.get("/v1/runs/%d/trace" % rid).json(), rec)


def test_trace_has_nvtx_ranges_when_injected(gapi):
    """NVTX ranges reach CUPTI unless the setting nvtx_to_cupti is false: a server of its own
    with it set explicitly (ATTND_NVTX_TO_CUPTI), so the test holds whatever the shared
    server's env."""
    srv = AttndServer(devices="all", env={"ATTND_NVTX_TO_CUPTI": "1"}).start()
    try:
        api = GpuApi(srv.url)
        rec = api.run_ok(backend="math", seed=fresh_seed(), profile="true", **SHAPE)
        trace = api.get("/v1/runs/%d/trace" % rec["id"]).json()
        validate_trace(trace, rec, want_nvtx=True)
        names = {e["name"] for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "user_annotation"}
        fact("trace NVTX ranges (math)", sorted(names))
        assert names & {"attn_fwd", "qk_matmul", "softmax", "pv_matmul"}, names
        srv.stop_checked()
    finally:
        srv.cleanup()
