"""GET /v1/runs as a query: the run parameter `tags`, a filter for every shape field and for
dtype, mask, impl, backend, status, device, node, GPU name, build commit and tag (each checked
against what the records themselves say), filters that compose, newest first with before/after
cursors, the aggregate (group_by), the CSV export, and the 400s of bad values — a backend,
device or node that no run of the history can have included.

Runs under both stores (make test-api-pg runs it with ATTND_TEST_STORE=postgresql): cursors
are taken from the answers, never computed from ids."""
import csv
import io
import os
import re
import statistics

import pytest

from attnd_api_helpers import REPO, Api, AttndServer, check_against_openapi, error_of, tiny

# (run parameters, what the run is for); tiny cpu reference runs of different shapes.
RUNS = [
    (dict(seq=16, tags="a,exp:1", verify="true"), "tags in the query; verified"),
    (dict(batch=2, seq=16, dtype="fp16"), "batch, dtype"),
    (dict(heads=4, kv_heads=2, seq_q=8, seq_kv=16), "grouped K/V heads, seq_q != seq_kv"),
    (dict(seq=16, head_dim_v=4, window=3, mask="causal_bottom_right"), "head_dim_v, window, mask"),
    (dict(seq=8, mask="none", tags="a"), "mask none, tag a again"),
    (dict(seq=16, seed=1, tags="exp:1"), "the first shape again: a group of two"),
]


@pytest.fixture(scope="module")
def hist():
    """A server of its own with the runs of RUNS (plus one in the body with tags as an array,
    and one failed run), and their records."""
    srv = AttndServer(extra=["--cpu-threads", "2", "--enable-fault-injection", "true"]).start()
    try:
        api = Api(srv.url)
        recs = [api.run_ok(**tiny(**params)) for params, _ in RUNS]
        r = api.run(body=tiny(seq=16, tags=["b", "c"]))
        assert r.status_code == 200, r.text
        recs.append(r.json())
        r = api.run(body=tiny(seq=16, fault="crash", tags=["b"]))
        assert r.status_code == 500 and r.json()["status"] == "failed", r.text[:500]
        recs.append(api.get("/v1/runs/%d" % r.json()["id"]).json())
        yield api, recs
        srv.stop_checked()
    finally:
        srv.cleanup()


def listed(api, **params):
    r = api.get("/v1/runs", params=params)
    assert r.status_code == 200, r.text[:500]
    return r.json()


def ids(api, **params):
    return [rec["id"] for rec in listed(api, limit=1000, **params)["runs"]]


def value_of(rec, field):
    """What a record says a filter field is (docs/api.md, History)."""
    p = rec["params"]
    if field == "kv_heads":
        return p.get("kv_heads", p["heads"])
    if field == "head_dim_v":
        return p.get("head_dim_v", p["head_dim"])
    if field == "gpu":
        return (rec.get("device") or {}).get("name")
    if field == "commit":
        return rec["build"]["commit"]
    if field == "impl":
        return rec.get("impl_used", p.get("impl"))
    if field in ("status", "node", "backend"):
        return rec[field]
    return p.get(field)


# ---------------------------------------------------------------- tags

def test_tags_are_a_run_parameter(hist, api):
    h, recs = hist
    assert recs[0]["params"]["tags"] == ["a", "exp:1"]
    assert recs[6]["params"]["tags"] == ["b", "c"]
    assert "tags" not in recs[1]["params"], "no tags: none in params"
    assert h.get("/v1/runs/%d" % recs[0]["id"]).json()["params"]["tags"] == ["a", "exp:1"]
    # A stored params object posted back runs with the same tags (on the session's server:
    # this module's history stays as the fixture made it).
    again = api.run(body=dict(recs[0]["params"], iters=1, warmup=0)).json()
    assert again["params"]["tags"] == ["a", "exp:1"], again
    body = api.run(body=tiny(tags="x,y")).json()
    assert body["params"]["tags"] == ["x", "y"], "a body may give them as text too"
    for rec in recs:
        check_against_openapi(rec, "Run")


@pytest.mark.parametrize("tags,code", [
    ("a,,b", "bad_value"), (",a", "bad_value"), ("a,", "bad_value"), ("has space", "bad_value"),
    ("x" * 33, "bad_value"), ("a,a", "bad_value"), ("é", "bad_value"), (",".join("t%d" % i for i in range(9)), "out_of_range"),
    ([1], "bad_value"), ({"a": 1}, "bad_value"), (["ok", ""], "bad_value"), (["a"] * 2, "bad_value")])
def test_bad_tags_are_400(api, tags, code):
    if isinstance(tags, str):
        r = api.run(params=tiny(tags=tags))
        assert r.status_code == 400, r.text[:300]
        assert (error_of(r)["code"], error_of(r)["field"]) == (code, "tags"), error_of(r)
    r = api.run(body=tiny(tags=tags))
    assert r.status_code == 400, r.text[:300]
    assert (error_of(r)["code"], error_of(r)["field"]) == (code, "tags"), error_of(r)


def test_eight_tags_of_32_characters_fit(api):
    tags = ["%d%s" % (i, "x" * 31) for i in range(8)]
    rec = api.run(body=tiny(tags=tags)).json()
    assert rec["params"]["tags"] == tags, rec


# ---------------------------------------------------------------- filters

def test_each_filter_selects_what_the_records_say(hist):
    api, recs = hist
    mine = {rec["id"] for rec in recs}
    fields = ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "head_dim_v", "window", "dtype", "mask",
              "backend", "status", "node", "gpu", "commit")
    for field in fields:
        values = {value_of(rec, field) for rec in recs} - {None}
        assert values, field
        for value in values:
            want = [rec["id"] for rec in recs if value_of(rec, field) == value]
            got = [i for i in ids(api, **{field: value}) if i in mine]
            assert got == want, (field, value, got, want)
    # every value a filter takes, also one no run has: an empty list, not a 400
    assert ids(api, batch=7) == [] and ids(api, window=100) == [] and ids(api, dtype="fp32") == []
    assert ids(api, impl="tma") == [] and ids(api, gpu="no such GPU") == [] and ids(api, commit="0" * 12) == []


def test_shape_filters_are_parameters(api):
    """?seq=128 was a 400 unknown_parameter."""
    for params in ({"seq": 128}, {"seq_q": 128}, {"head_dim": 64}, {"dtype": "bf16"}, {"tag": "x"},
                   {"order": "newest"}, {"before": 5}):
        r = api.get("/v1/runs", params=params)
        assert r.status_code == 200, (params, r.text[:300])


def test_seq_filters_seq_q_and_seq_kv(hist):
    api, recs = hist
    mine = {rec["id"] for rec in recs}
    want = [r["id"] for r in recs if r["params"]["seq_q"] == 16 and r["params"]["seq_kv"] == 16]
    assert [i for i in ids(api, seq=16) if i in mine] == want
    # seq_q given too overrides seq's seq_q (as in a run)
    want = [r["id"] for r in recs if r["params"]["seq_q"] == 8 and r["params"]["seq_kv"] == 16]
    assert [i for i in ids(api, seq=16, seq_q=8) if i in mine] == want and want


def test_tag_filter(hist):
    api, recs = hist
    for tag in ("a", "exp:1", "b", "c"):
        want = [r["id"] for r in recs if tag in r["params"].get("tags", [])]
        assert [i for i in ids(api, tag=tag) if i in {r["id"] for r in recs}] == want and want, tag
    assert ids(api, tag="never-given") == []


def test_filters_compose(hist):
    api, recs = hist
    mine = {rec["id"] for rec in recs}
    want = [r["id"] for r in recs if "exp:1" in r["params"].get("tags", []) and r["params"]["seq_q"] == 16
            and r["status"] == "done" and r["params"]["dtype"] == "bf16"]
    assert len(want) == 2
    assert [i for i in ids(api, tag="exp:1", seq_q=16, status="done", dtype="bf16", backend="reference",
                           device="cpu", node=recs[0]["node"]) if i in mine] == want
    assert ids(api, tag="exp:1", batch=2) == []
    assert [i for i in ids(api, tag="b", status="failed") if i in mine] == [recs[7]["id"]]


# ---------------------------------------------------------------- order and cursors

def test_newest_first_and_both_cursors(hist):
    api, recs = hist
    everything = ids(api)
    newest = listed(api, order="newest", limit=3)
    assert set(newest) == {"runs", "next_before", "next_after"}, newest.keys()
    assert [r["id"] for r in newest["runs"]] == everything[::-1][:3]
    # paging back through next_before walks the whole history, newest first
    seen, before = [r["id"] for r in newest["runs"]], newest["next_before"]
    while True:
        page = listed(api, order="newest", limit=3, before=before)
        if not page["runs"]:
            assert page["next_before"] == before
            break
        seen += [r["id"] for r in page["runs"]]
        before = page["next_before"]
    assert seen == everything[::-1]
    assert listed(api, order="newest", after=10 ** 15)["next_before"] is None, "nothing there, no before: null"
    # next_after of a newest page is where the newest listed run is: nothing comes after it yet
    assert listed(api, after=newest["next_after"])["runs"] == []
    # before and after bound a window of the oldest-first order too
    first = listed(api, limit=2)
    window = listed(api, after=first["next_after"], before=newest["next_before"])
    assert [r["id"] for r in window["runs"]] == everything[2:len(everything) - 3]
    # limit is honoured in both orders
    assert len(listed(api, limit=1)["runs"]) == 1 and len(listed(api, order="newest", limit=1)["runs"]) == 1


# ---------------------------------------------------------------- refusals

@pytest.mark.parametrize("params,field,code", [
    ({"backend": "nope"}, "backend", "unknown_backend"),
    ({"backend": ""}, "backend", "unknown_backend"),
    ({"device": "gpu0"}, "device", "bad_device"),
    ({"device": "cuda:01"}, "device", "bad_device"),
    ({"node": "no-such-node"}, "node", "bad_value"),
    ({"node": ""}, "node", "bad_value")])
def test_a_value_no_run_can_have_is_400(api, params, field, code):
    """docs/api.md said so; the server answered an empty list."""
    r = api.get("/v1/runs", params=params)
    assert r.status_code == 400, r.text[:300]
    assert (error_of(r)["field"], error_of(r)["code"]) == (field, code), error_of(r)


@pytest.mark.parametrize("params,field", [
    ({"seq": "0"}, "seq"), ({"seq": "x"}, "seq"), ({"batch": "0"}, "batch"), ({"heads": "1e3"}, "heads"),
    ({"kv_heads": "-1"}, "kv_heads"), ({"seq_q": "2147483649"}, "seq_q"), ({"seq_kv": ""}, "seq_kv"),
    ({"head_dim": "8.0"}, "head_dim"), ({"head_dim_v": "0"}, "head_dim_v"), ({"window": "-1"}, "window"),
    ({"batch": "+8"}, "batch"), ({"seq_q": "016"}, "seq_q"),
    ({"dtype": "fp8"}, "dtype"), ({"mask": "causal_top"}, "mask"), ({"impl": "fast"}, "impl"),
    ({"gpu": ""}, "gpu"), ({"gpu": "x" * 129}, "gpu"), ({"commit": "ABC"}, "commit"), ({"commit": "a" * 41}, "commit"),
    ({"tag": "a b"}, "tag"), ({"tag": ""}, "tag"), ({"order": "random"}, "order"), ({"before": "0"}, "before"),
    ({"before": "x"}, "before"), ({"format": "xml"}, "format"), ({"group_by": "colour"}, "group_by"),
    ({"group_by": "seq"}, "group_by"), ({"group_by": "backend,backend"}, "group_by"), ({"group_by": ""}, "group_by"),
    ({"group_by": "backend", "format": "csv"}, "format"), ({"tags": "a"}, "tags")])
def test_bad_values_are_400_naming_the_field(api, params, field):
    r = api.get("/v1/runs", params=params)
    assert r.status_code == 400, (params, r.text[:300])
    assert error_of(r)["field"] == field, error_of(r)


# ---------------------------------------------------------------- aggregate

def test_group_by_counts_and_medians(hist):
    api, recs = hist
    body = listed(api, group_by="backend,seq_q,mask", tag="exp:1")
    assert set(body) == {"groups", "group_by", "more"} and body["group_by"] == ["backend", "seq_q", "mask"]
    check_against_openapi(body, "RunGroups")
    timed = [r for r in recs if "exp:1" in r["params"].get("tags", []) and r.get("timing")]
    assert len(timed) == 2
    (group,) = body["groups"]
    medians = sorted(r["timing"]["median_us"] for r in timed)
    assert (group["backend"], group["seq_q"], group["mask"], group["count"]) == ("reference", 16, "causal", 2)
    assert group["median_us"] == pytest.approx(statistics.median(medians), rel=1e-12)
    assert (group["min_us"], group["max_us"]) == pytest.approx((medians[0], medians[-1]), rel=1e-12)
    # every group of the module's runs: counts and medians as the records say (the failed
    # run has no median and is left out)
    mine = {r["id"] for r in recs}
    body = listed(api, group_by="seq_q,seq_kv,dtype", backend="reference", limit=1000)
    want = {}
    for r in api.get("/v1/runs", params={"limit": 1000}).json()["runs"]:
        if (r.get("timing") or {}).get("median_us") is not None:
            key = (r["params"]["seq_q"], r["params"]["seq_kv"], r["params"]["dtype"])
            want.setdefault(key, []).append(r["timing"]["median_us"])
    got = {(g["seq_q"], g["seq_kv"], g["dtype"]): g for g in body["groups"]}
    assert set(got) == set(want)
    for key, ms in want.items():
        assert got[key]["count"] == len(ms) and got[key]["median_us"] == pytest.approx(statistics.median(ms))
    assert list(got) == sorted(got), "ordered by the group values"
    assert mine
    # limit caps the groups and says there were more
    two = listed(api, group_by="seq_q,seq_kv,dtype", backend="reference", limit=1)
    assert len(two["groups"]) == 1 and two["more"] is True


# ---------------------------------------------------------------- CSV

def documented_csv_columns():
    """The columns docs/api.md lists under "CSV export", in order."""
    with open(os.path.join(REPO, "docs", "api.md")) as f:
        text = f.read()
    section = text[text.index("### CSV export"):]
    section = section[:section.index("\n#", 1)]
    return re.findall(r"^\| `([a-z0-9_]+)` \|", section, re.M)


def test_csv_export_has_the_documented_columns(hist):
    api, recs = hist
    r = api.get("/v1/runs", params={"format": "csv", "limit": 1000})
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/csv"), r.headers
    assert r.text.endswith("\r\n")
    rows = list(csv.DictReader(io.StringIO(r.text, newline="")))
    columns = documented_csv_columns()
    assert list(rows[0].keys()) == columns
    for need in ("verify_pass", "verify_rel_l2_err", "stop_reason", "rse", "p10_us", "p90_us", "impl_used", "gpu",
                 "sm_min_mhz", "sm_max_mhz", "throttled", "commit", "tags"):
        assert need in columns, need
    by_id = {int(row["id"]): row for row in rows}
    assert r.headers["Attnd-Next-After"] == str(listed(api, limit=1000)["next_after"])
    for rec in recs:
        row = by_id[rec["id"]]
        timing = rec.get("timing") or {}
        assert row["status"] == rec["status"] and row["gpu"] == (rec["device"] or {}).get("name", "")
        assert row["commit"] == rec["build"]["commit"] and row["tags"] == " ".join(rec["params"].get("tags", []))
        assert row["kv_heads"] == str(value_of(rec, "kv_heads")) and row["window"] == str(rec["params"].get("window", ""))
        if timing:
            assert float(row["median_us"]) == timing["median_us"] and float(row["p90_us"]) == timing["p90_us"]
            assert row["stop_reason"] == timing["stop_reason"]
            clock = timing["clocks"]["sm_max_mhz"]  # null where nothing read the clocks
            assert row["sm_max_mhz"] == ("" if clock is None else str(clock))
        else:
            assert row["median_us"] == "" and row["error"] == rec["error"]["code"]
    verified = [rec for rec in recs if rec.get("verify")]
    for rec in verified:
        assert by_id[rec["id"]]["verify_pass"] == str(rec["verify"]["pass"]).lower()
    # filters, order and the cursor header work as in JSON
    r = api.get("/v1/runs", params={"format": "csv", "order": "newest", "limit": 2, "tag": "b"})
    rows = list(csv.DictReader(io.StringIO(r.text, newline="")))
    want = [rec["id"] for rec in recs if "b" in rec["params"].get("tags", [])][::-1]
    assert [int(x["id"]) for x in rows] == want[:2] and "Attnd-Next-Before" in r.headers


def test_accept_text_csv_asks_for_csv(hist):
    """Accept: text/csv is format=csv (a spreadsheet's or curl's -H); format= wins over it, and
    an Accept that puts JSON first gets JSON."""
    api, _ = hist
    import requests
    url = api.url + "/v1/runs"
    by_accept = requests.get(url, params={"limit": 1000}, headers={"Accept": "text/csv"}, timeout=30)
    by_format = requests.get(url, params={"limit": 1000, "format": "csv"}, timeout=30)
    assert by_accept.status_code == 200 and by_accept.headers["Content-Type"].startswith("text/csv")
    assert by_accept.text == by_format.text
    assert requests.get(url, params={"format": "json"}, headers={"Accept": "text/csv"},
                        timeout=30).headers["Content-Type"].startswith("application/json")
    assert requests.get(url, headers={"Accept": "application/json, text/csv"},
                        timeout=30).headers["Content-Type"].startswith("application/json")


def test_csv_of_nothing_is_its_header(hist):
    api, _ = hist
    r = api.get("/v1/runs", params={"format": "csv", "tag": "never-given"})
    assert r.status_code == 200 and r.text == ",".join(documented_csv_columns()) + "\r\n"


def test_pages_match_the_document(hist):
    api, _ = hist
    check_against_openapi(listed(api, limit=2), "RunPage")
    check_against_openapi(listed(api, limit=2, order="newest"), "RunPageNewest")
    check_against_openapi(listed(api, order="newest", after=10 ** 15), "RunPageNewest")
