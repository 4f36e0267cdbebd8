"""The uploaded case of serving batches on the cpu device (docs/serving.md, docs/tensors.md):
int32 resident tensors for the block table and the lengths, K/V uploaded in the paged layout
[num_pages, page_size, kv_heads, head_dim], q/k/v token-major in a ragged batch.

- int32 uploads in the three formats, listed and downloaded like the others;
- a run over uploaded q, paged k/v, block table and lengths gives the generated run's
  fingerprint, bit for bit, and so do its contiguous twin and the dense paged case (inputs
  rebuilt with clients/python attnd_ref: serving_layout / serving_inputs); empty and
  one-token sequences, seq_kv not a multiple of the page;
- refusals name their field: a dtype, a shape, a page outside the cache (checked by the
  worker, which holds the table), a negative length; GPU variants keep answering 422;
- a queued run holds its block table and lengths: DELETE answers 409 in_use.
"""
import io
import json
import struct

import numpy as np
import pytest

from attnd_api_helpers import error_of, load_gen

GQA = {"heads": 4, "kv_heads": 2, "head_dim": 8, "warmup": 0, "iters": 1, "backend": "reference", "device": "cpu",
       "dtype": "fp32"}


def upload(api, array, **params):
    """array as raw bytes with its dtype and shape; the tensor's id."""
    dtype = {np.dtype(np.float32): "fp32", np.dtype(np.int32): "int32"}[array.dtype]
    q = dict(dtype=dtype, shape=",".join(str(n) for n in array.shape), device="cpu", **params)
    r = api.post("/v1/tensors", params=q, data=np.ascontiguousarray(array).tobytes())
    assert r.status_code == 201, r.text[:500]
    return r.json()["id"]


def run(api, body):
    r = api.run(body=body)
    return r, (r.json() if r.headers.get("content-type", "").startswith("application/json") else None)


def run_ok(api, body):
    r, rec = run(api, body)
    assert r.status_code == 200 and rec["status"] == "done", (body, r.status_code, r.text[:1000])
    return rec


def refused(api, body, status, code, field):
    r, _ = run(api, body)
    assert r.status_code == status, (body, r.status_code, r.text[:500])
    err = error_of(r)
    assert err["code"] == code and err["field"] == field, (body, err)
    return err


def npy_bytes(a):
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


# ---------------------------------------------------------------- int32 uploads

@pytest.mark.parametrize("fmt", ["raw", "npy", "safetensors"])
def test_int32_uploads_list_and_download(api, fmt):
    a = np.array([[3, 0, 7], [1, 2, 2147483647]], dtype=np.int32)
    if fmt == "raw":
        r = api.post("/v1/tensors", params={"dtype": "int32", "shape": "2,3", "device": "cpu"}, data=a.tobytes())
    elif fmt == "npy":
        r = api.post("/v1/tensors", params={"device": "cpu"}, data=npy_bytes(a))
    else:
        head = json.dumps({"table": {"dtype": "I32", "shape": [2, 3], "data_offsets": [0, a.nbytes]}}).encode()
        r = api.post("/v1/tensors", params={"device": "cpu"}, data=struct.pack("<Q", len(head)) + head + a.tobytes())
    assert r.status_code == 201, r.text
    t = r.json()[0] if isinstance(r.json(), list) else r.json()
    t = t if "id" in t else r.json()["tensors"][0]
    assert t["dtype"] == "int32" and t["shape"] == [2, 3] and t["bytes"] == 24, t
    listed = {x["id"]: x for x in api.get("/v1/tensors").json()["tensors"]}
    assert listed[t["id"]]["dtype"] == "int32"
    got = np.load(io.BytesIO(api.get("/v1/tensors/%s/data" % t["id"]).content))
    assert got.dtype == np.int32 and (got == a).all()
    raw = api.get("/v1/tensors/%s/data" % t["id"], params={"format": "raw"}).content
    assert raw == a.tobytes()
    assert api.request("DELETE", "/v1/tensors/%s" % t["id"]).status_code == 200


def test_int32_raw_upload_keeps_the_size_check(api):
    r = api.post("/v1/tensors", params={"dtype": "int32", "shape": "3", "device": "cpu"}, data=b"\0" * 6)
    assert r.status_code == 400, r.text
    r = api.post("/v1/tensors", params={"dtype": "int64", "shape": "3", "device": "cpu"}, data=b"\0" * 24)
    assert r.status_code == 400 and error_of(r)["field"] == "dtype" and "int32" in error_of(r)["message"], r.text


# ---------------------------------------------------------------- runs over uploads

def uploaded_run(api, gen, body, seed, contiguous=False):
    """The generated run of body, then the same logical inputs uploaded (rebuilt with attnd_ref)
    and run: both records. contiguous: the uploaded run drops page_size (the contiguous twin)."""
    generated = run_ok(api, dict(body, seed=seed))
    p = generated["params"]
    lay = gen.serving_layout(seed, batch=p["batch"], seq_q=p["seq_q"], seq_kv=p["seq_kv"],
                             seqlens_q=body.get("seqlens_q"), seqlens_kv=body.get("seqlens_kv"),
                             page_size=0 if contiguous else p.get("page_size", 0), num_pages=p.get("num_pages"))
    q, k, v = gen.serving_inputs(seed, lay, GQA["heads"], GQA["head_dim"], "fp32", kv_heads=GQA["kv_heads"],
                                 head_dim_v=body.get("head_dim_v"))
    ids = {n: upload(api, a) for n, a in (("q", q), ("k", k), ("v", v))}
    up = {x: body[x] for x in ("mask", "window", "seq_kv") if x in body}
    up.update({x: GQA[x] for x in ("backend", "device", "warmup", "iters")}, **ids)
    if not lay["ragged"]:
        up["seq_kv"] = p["seq_kv"]  # a paged k says nothing of the sequences' length
    for side in ("seqlens_q", "seqlens_kv"):
        if side in body:
            ids[side] = up[side] = upload(api, np.asarray(lay[side], dtype=np.int32))
    if lay.get("page_size"):
        up["page_size"] = lay["page_size"]
        ids["block_table"] = up["block_table"] = upload(api, lay["block_table"])
    rec = run_ok(api, up)
    for tid in ids.values():
        assert api.request("DELETE", "/v1/tensors/%s" % tid).status_code == 200
    return generated, rec, ids


RAGGED = dict(GQA, seqlens_q=[5, 0, 1, 7], seqlens_kv=[33, 0, 17, 1], mask="causal_bottom_right", window=3)


@pytest.mark.parametrize("page_size", [1, 16, 5])
def test_uploaded_paged_ragged_run_gives_the_generated_fingerprint(api, page_size):
    """Lengths 0 and 1 among them, 33 and 17 not multiples of the page."""
    gen = load_gen()
    body = dict(RAGGED, page_size=page_size)
    generated, rec, ids = uploaded_run(api, gen, body, seed=9)
    assert rec["output"]["fingerprint"] == generated["output"]["fingerprint"]
    assert rec["output"]["shape"] == generated["output"]["shape"] == [13, 4, 8]
    p = rec["params"]
    assert p["seqlens_q"] == ids["seqlens_q"] and p["seqlens_kv"] == ids["seqlens_kv"]
    assert p["block_table"] == ids["block_table"] and p["k"] == ids["k"]
    assert p["num_pages"] == generated["params"]["num_pages"] and p["seq_kv"] == 33 and p["seq_q"] == 7
    # the work counts the same real tokens
    assert rec["perf"]["flops"] == generated["perf"]["flops"]
    assert rec["perf"]["tokens_q"] == 13 and rec["perf"]["tokens_kv"] == 51


def test_compare_of_uploaded_and_generated_runs_names_no_tensor_id(api):
    """An uploaded run against the generated run of the same inputs: the same problem. q, k
    and v given as tensor ids were left out of the comparison's warnings, but block_table,
    seqlens_q and seqlens_kv as ids were named as differences. Two different lists of lengths
    still are."""
    gen = load_gen()
    generated, rec, ids = uploaded_run(api, gen, dict(RAGGED, page_size=16), seed=9)
    r = api.get("/v1/compare", params={"base": generated["id"], "run": rec["id"]}, timeout=30)
    assert r.status_code == 200, r.text[:500]
    problem = [w for w in r.json()["warnings"] if w["field"] == "problem"]
    assert problem == [] or set(problem[0]["base"]) == {"seed"}, problem  # the uploaded run has the default seed
    other = run_ok(api, dict(RAGGED, seqlens_kv=[33, 0, 17, 2], seed=9))
    base = run_ok(api, dict(RAGGED, seed=9))
    r = api.get("/v1/compare", params={"base": base["id"], "run": other["id"]}, timeout=30)
    (problem,) = [w for w in r.json()["warnings"] if w["field"] == "problem"]
    assert set(problem["base"]) == {"seqlens_kv"} and problem["run"]["seqlens_kv"] == [33, 0, 17, 2], problem


def test_uploaded_ragged_contiguous_twin(api):
    """The same logical K/V, token-major and unpaged: the paged run's fingerprint."""
    gen = load_gen()
    paged, _, _ = uploaded_run(api, gen, dict(RAGGED, page_size=16), seed=9)
    generated, rec, _ = uploaded_run(api, gen, RAGGED, seed=9, contiguous=True)
    assert rec["output"]["fingerprint"] == generated["output"]["fingerprint"] == paged["output"]["fingerprint"]


def test_uploaded_dense_paged_run_and_its_twin(api):
    """Not ragged: q [batch, heads, seq_q, head_dim], k and v paged, seq_kv 33 in pages of 5."""
    gen = load_gen()
    body = dict(GQA, batch=3, seq_q=5, seq_kv=33, mask="causal_bottom_right", page_size=5)
    generated, rec, _ = uploaded_run(api, gen, body, seed=4)
    flat = run_ok(api, dict(GQA, batch=3, seq_q=5, seq_kv=33, mask="causal_bottom_right", seed=4))
    assert rec["output"]["fingerprint"] == generated["output"]["fingerprint"] == flat["output"]["fingerprint"]
    assert rec["output"]["shape"] == [3, 4, 5, 8]


def test_uploaded_lengths_with_generated_inputs(api):
    """Only the lengths uploaded: the run of the list they hold."""
    tq, tkv = (upload(api, np.array(x, dtype=np.int32)) for x in ([2, 1, 0], [9, 1, 4]))
    body = dict(GQA, page_size=4, seed=3)
    listed = run_ok(api, dict(body, seqlens_q=[2, 1, 0], seqlens_kv=[9, 1, 4]))
    rec = run_ok(api, dict(body, seqlens_q=tq, seqlens_kv=tkv))
    assert rec["output"]["fingerprint"] == listed["output"]["fingerprint"]
    assert rec["params"]["batch"] == 3 and rec["params"]["seq_kv"] == 9
    # the stored params post back to the same run while the tensors are there
    again = run_ok(api, {k: v for k, v in rec["params"].items() if k not in ("verify_cpu_max_macs",)})
    assert again["output"]["fingerprint"] == rec["output"]["fingerprint"]
    for t in (tq, tkv):
        assert api.request("DELETE", "/v1/tensors/%s" % t).status_code == 200


# ---------------------------------------------------------------- refusals

@pytest.fixture
def paged(api):
    """A small paged case, uploaded: batch 2, lengths [5, 3], pages of 4, 4 pages."""
    ids = {
        "q": upload(api, np.zeros((8, 4, 8), np.float32)),
        "k": upload(api, np.zeros((4, 4, 2, 8), np.float32)),
        "v": upload(api, np.zeros((4, 4, 2, 8), np.float32)),
        "block_table": upload(api, np.array([[3, 1], [0, 0]], np.int32)),
        "seqlens_kv": upload(api, np.array([5, 3], np.int32)),
        "seqlens_q": upload(api, np.array([4, 4], np.int32)),
    }
    yield ids
    for tid in ids.values():
        api.request("DELETE", "/v1/tensors/%s" % tid)


def test_the_small_paged_case_runs(api, paged):
    rec = run_ok(api, dict(GQA, page_size=4, **paged))
    assert rec["params"]["num_pages"] == 4 and rec["output"]["shape"] == [8, 4, 8]


def test_a_page_outside_the_cache_is_refused_by_the_worker(api, paged):
    bad = upload(api, np.array([[3, 4], [0, 0]], np.int32))  # page 4 of 4
    err = refused(api, dict(GQA, page_size=4, **dict(paged, block_table=bad)), 400, "out_of_range", "block_table")
    assert "[0][1] is 4" in err["message"], err
    neg = upload(api, np.array([[3, 1], [0, -1]], np.int32))  # past sequence 1's pages, still checked
    refused(api, dict(GQA, page_size=4, **dict(paged, block_table=neg)), 400, "out_of_range", "block_table")


@pytest.mark.parametrize("case,status,code,field", [
    ("float_block_table", 422, "dtype_mismatch", "block_table"),
    ("int32_q", 422, "dtype_mismatch", "q"),
    ("float_lengths", 422, "dtype_mismatch", "seqlens_kv"),
    ("lengths_2d", 422, "shape_mismatch", "seqlens_kv"),
    ("table_rows", 422, "shape_mismatch", "block_table"),
    ("table_short", 422, "shape_mismatch", "block_table"),
    ("q_tokens", 422, "shape_mismatch", "q"),
    ("page_size", 422, "shape_mismatch", "k"),
    ("num_pages", 422, "shape_mismatch", "num_pages"),
    ("negative_length", 400, "out_of_range", "seqlens_kv"),
    ("lengths_vs_batch", 400, "conflict", "seqlens_q"),
    ("table_without_pages", 400, "conflict", "block_table"),
    ("dense_q_in_ragged", 422, "shape_mismatch", "q"),
])
def test_refusals_name_their_field(api, paged, case, status, code, field):
    body = dict(GQA, page_size=4, **paged)
    if case == "float_block_table":
        body["block_table"] = upload(api, np.zeros((2, 2), np.float32))
    elif case == "int32_q":
        body["q"] = upload(api, np.zeros((8, 4, 8), np.int32))
    elif case == "float_lengths":
        body["seqlens_kv"] = upload(api, np.array([5, 3], np.float32))
    elif case == "lengths_2d":
        body["seqlens_kv"] = upload(api, np.array([[5, 3]], np.int32))
    elif case == "table_rows":
        body["block_table"] = upload(api, np.zeros((3, 2), np.int32))
    elif case == "table_short":
        body["block_table"] = upload(api, np.zeros((2, 1), np.int32))
    elif case == "q_tokens":
        body["q"] = upload(api, np.zeros((7, 4, 8), np.float32))
    elif case == "page_size":
        body["page_size"] = 2
    elif case == "num_pages":
        body["num_pages"] = 5
    elif case == "negative_length":
        body["seqlens_kv"] = upload(api, np.array([5, -3], np.int32))
    elif case == "lengths_vs_batch":
        body["batch"] = 3
    elif case == "table_without_pages":
        body = dict(GQA, block_table=paged["block_table"], batch=2, seq=8)
    elif case == "dense_q_in_ragged":
        body["q"] = upload(api, np.zeros((2, 4, 4, 8), np.float32))
    refused(api, body, status, code, field)


def test_gpu_variants_take_resident_lengths_where_they_live(api, paged):
    """A GPU variant takes resident lengths like any serving batch; these live on the cpu device,
    which runs no GPU variant: 422 naming the device, not the layout."""
    for name in ("efficient", "cudnn", "flash"):
        body = {"backend": name, "seqlens_kv": paged["seqlens_kv"], "seqlens_q": paged["seqlens_q"]}
        err = refused(api, body, 422, "unsupported", "device")
        assert name in err["message"] and "cpu device" in err["message"], err


def test_unknown_lengths_tensor_is_404(api):
    refused(api, dict(GQA, seqlens_kv="t999999"), 404, "not_found", "seqlens_kv")
    refused(api, dict(GQA, page_size=4, block_table="t999999"), 404, "not_found", "block_table")


# ---------------------------------------------------------------- pins

def test_queued_run_holds_its_block_table_and_lengths(start_server):
    from attnd_api_helpers import Api

    api = Api(start_server(extra=["--cpu-max-macs", "0", "--cpu-threads", "1"]).url)
    table = upload(api, np.array([[1, 0]], np.int32))
    lengths = upload(api, np.array([6], np.int32))
    busy = dict(backend="reference", device="cpu", batch=1, heads=1, seq=64, head_dim=32, warmup=0,
                min_time_ms=3000, max_time_ms=3000, max_iters=100000)
    r = api.run(params=dict(busy, **{"async": "true"}))
    assert r.status_code == 202, r.text
    body = dict(GQA, page_size=4, block_table=table, seqlens_kv=lengths, seq_q=1)
    body["async"] = True
    r = api.run(body=body)
    assert r.status_code == 202, r.text
    run_id = r.json()["id"]
    for tid in (table, lengths):
        d = api.request("DELETE", "/v1/tensors/%s" % tid)
        assert d.status_code == 409 and error_of(d)["code"] == "in_use", d.text
        assert str(run_id) in error_of(d)["message"]
    import time
    deadline = time.time() + 60
    while api.get("/v1/runs/%d" % run_id).json()["status"] not in ("done", "failed"):
        assert time.time() < deadline
        time.sleep(0.2)
    assert api.get("/v1/runs/%d" % run_id).json()["status"] == "done"
    for tid in (table, lengths):
        assert api.request("DELETE", "/v1/tensors/%s" % tid).status_code == 200


# ---------------------------------------------------------------- the Python client

def test_client_uploads_int32_arrays_and_runs_on_them(server):
    """attnd.Client.upload sends a numpy int32 array as .npy ('<i4'): no dtype to pass. A
    decode batch over uploaded lengths and a block table gives the listed lengths' run."""
    import os
    import sys

    from attnd_api_helpers import REPO

    sys.path.insert(0, os.path.join(REPO, "clients", "python"))
    import attnd

    client = attnd.Client(server.url, timeout=90)
    lengths = client.upload(np.array([7, 1, 12], np.int32), name="seq_lens", device="cpu")
    table = client.upload(np.array([[4, 0, 9], [2, 0, 0], [1, 5, 3]], np.int32), name="block_table", device="cpu")
    assert lengths["dtype"] == "int32" and lengths["shape"] == [3] and table["shape"] == [3, 3]
    body = dict(GQA, seq_q=1, page_size=4, num_pages=10, seed=2, mask="causal_bottom_right")
    rec = client.run(**dict(body, seqlens_kv=lengths["id"], block_table=table["id"]))
    assert rec["status"] == "done" and rec["params"]["seqlens_kv"] == lengths["id"], rec
    # the same cache drawn from seed, read through the same table: k and v generated follow it
    twin = client.run(**dict(body, seqlens_kv=[7, 1, 12], block_table=table["id"]))
    assert twin["output"]["fingerprint"] == rec["output"]["fingerprint"]
    for t in (lengths, table):
        client.delete_tensor(t["id"])


# ---------------------------------------------------------------- plans

@pytest.mark.parametrize("params,field", [({"seqlens_kv": "t3"}, "seqlens_kv"),
                                          ({"page_size": 4, "block_table": "t3"}, "block_table")])
def test_a_plan_refuses_resident_lengths_and_tables(tmp_path, params, field):
    """`attnd batch` runs generated inputs: lengths or a block table in a tensor are refused
    before anything runs, naming the parameter."""
    import subprocess

    from attnd_api_helpers import REPO, attnd_bin

    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"backends": ["reference"], "params": dict(params, heads=2, head_dim=4)}))
    p = subprocess.run([attnd_bin(), "batch", str(path), "--devices", "none", "--data-dir", str(tmp_path / "d"),
                        "--log-level", "warn"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert p.returncode != 0 and field in p.stderr and "plan" in p.stderr, (p.returncode, p.stderr)
