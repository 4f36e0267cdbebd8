"""The `impl` run parameter on a server without GPUs (the cpu worker is its only device): the
400s of common/variant_info.c's check, the /v1/variants listing of each variant's
implementations, GPU runs that name one taking the same 503/422 path as any GPU run, and the
OpenAPI entries. tests/gpu/test_impl.py runs each implementation on a GPU."""
import json
import os

import pytest

from attnd_api_helpers import REPO, check_against_openapi, error_of, tiny

IMPLS = {"flash": ["tma", "wgmma", "w4", "w8", "legacy", "splitkv"], "efficient": ["exact", "legacy"],
         "flashinfer": ["tensor_cores", "cuda_cores"]}
SINGLE = ("reference", "naive", "naive_inplace", "math", "cudnn")


def load_doc():
    with open(os.path.join(REPO, "docs", "openapi.json")) as f:
        return json.load(f)


def variants(api):
    r = api.get("/v1/variants")
    assert r.status_code == 200
    return {v["name"]: v for v in r.json()["variants"]}


def test_variants_list_implementations(api):
    by_name = variants(api)
    for name, v in by_name.items():
        check_against_openapi(v, "Variant")
        assert [i["name"] for i in v["impls"]] == IMPLS.get(name, []), name
        for impl in v["impls"]:
            assert isinstance(impl["summary"], str) and impl["summary"], impl
            assert impl["devices"] == [], "no worker here runs %s %s: %r" % (name, impl["name"], impl)
    for name in ("tma", "wgmma"):
        needs = next(i for i in by_name["flash"]["impls"] if i["name"] == name)["needs"]
        assert "9.0" in needs and "sm_90a" in needs, needs
    for name in ("w4", "w8", "legacy", "splitkv"):
        assert next(i for i in by_name["flash"]["impls"] if i["name"] == name)["needs"] is None
    assert all(i["needs"] is None for i in by_name["flashinfer"]["impls"])


@pytest.mark.parametrize("backend,impl", [("flash", "nope"), ("flash", "exact"), ("efficient", "tma"),
                                          ("efficient", ""), ("flash", "TMA"), ("flashinfer", "splitkv"),
                                          ("flashinfer", "tensor-cores")])
def test_unknown_implementation_is_400_naming_the_ones_there_are(api, backend, impl):
    for r in (api.run({"backend": backend, "impl": impl}), api.run(body={"backend": backend, "impl": impl})):
        assert r.status_code == 400, r.text
        err = error_of(r)
        assert err["code"] == "bad_value" and err["field"] == "impl", err
        for name in IMPLS[backend]:
            assert name in err["message"], err


@pytest.mark.parametrize("backend", SINGLE)
def test_impl_on_a_backend_with_one_implementation_is_400(api, backend):
    params = tiny(backend=backend, impl="legacy")
    if backend != "reference":
        del params["device"]
    r = api.run(body=params)
    assert r.status_code == 400, r.text
    err = error_of(r)
    assert err["code"] == "bad_value" and err["field"] == "impl", err
    assert all(name in err["message"] for name in IMPLS), err


@pytest.mark.parametrize("value", [1, True, ["tma"], {"name": "tma"}])
def test_impl_must_be_a_string(api, value):
    r = api.run(body={"backend": "flash", "impl": value})
    assert r.status_code == 400, r.text
    err = error_of(r)
    assert err["code"] == "bad_value" and err["field"] == "impl", err


DECODE = dict(backend="flash", impl="splitkv", batch=2, heads=8, seq_q=1, seq_kv=4096, head_dim=128, dtype="bf16")


@pytest.mark.parametrize("change,field,words", [
    (dict(seq_q=17), "seq_q", ["seq_q up to 16", "got 17"]),
    (dict(seq_q=4096, seq_kv=4096), "seq_q", ["seq_q up to 16"]),
    (dict(head_dim=96), "head_dim", ["head_dim 64, 128 and 256", "not 96"]),
    (dict(head_dim=32), "head_dim", ["head_dim 64, 128 and 256", "not 32"]),
])
def test_splitkv_refuses_what_it_does_not_run(api, change, field, words):
    """flash's split-KV decode has no fallback: its limits are 422s before any device is
    chosen (the other impls fall back to a kernel that runs the problem)."""
    params = dict(DECODE, **change)
    for r in (api.run(dict(params)), api.run(body=dict(params))):
        assert r.status_code == 422, r.text
        err = error_of(r)
        assert err["code"] == "unsupported" and err["field"] == field, err
        for w in words:
            assert w in err["message"], err
        # the same problem under the default family is no refusal of the problem (503: no GPU here)
        plain = dict(params)
        del plain["impl"]
        assert api.run(plain).status_code == 503, plain


@pytest.mark.parametrize("seq_q,mask", [(1, "none"), (16, "causal_bottom_right"), (4, "causal")])
def test_splitkv_decode_is_a_gpu_run(api, seq_q, mask):
    """Within its limits it takes the path of any GPU run: 503 without a device."""
    r = api.run(dict(DECODE, seq_q=seq_q, mask=mask))
    assert r.status_code == 503, r.text
    assert error_of(r)["code"] == "no_device", r.text


def last_run_id(api):
    after = 0
    while True:
        page = api.get("/v1/runs?limit=1000&after=%d" % after).json()
        if not page["runs"]:
            return after
        after = page["next_after"]


def test_refused_impl_stores_nothing(api):
    before = last_run_id(api)
    assert api.run(body=tiny(impl="tma")).status_code == 400
    assert api.run({"backend": "flash", "impl": "w4"}).status_code == 503
    after = api.get("/v1/runs?after=%d" % before).json()["runs"]
    assert after == [], after


@pytest.mark.parametrize("device", [None, "cpu", "cuda:0", "cuda:7"])
@pytest.mark.parametrize("backend", sorted(IMPLS))
def test_gpu_runs_naming_an_implementation_refuse_like_any_gpu_run(api, backend, device):
    """Without a GPU, impl changes nothing of the refusal: 503 no_device by default or for a
    cuda device not served, 422 unsupported on the cpu device. A decode (seq_q 1): within the
    limits of every implementation (splitkv's are seq_q up to 16)."""
    base = {"backend": backend, "seq_q": 1}
    if device:
        base["device"] = device
    plain = api.run(dict(base))
    want = error_of(plain)
    assert plain.status_code == (422 if device == "cpu" else 503), plain.text
    for impl in IMPLS[backend]:
        r = api.run(dict(base, impl=impl))
        assert r.status_code == plain.status_code, r.text
        assert error_of(r) == want, (impl, r.text)


def test_null_impl_is_the_default_and_not_recorded(api):
    rec = api.run(body=tiny(impl=None))
    assert rec.status_code == 200, rec.text
    rec = rec.json()
    assert "impl" not in rec["params"], rec["params"]
    assert "impl_used" not in rec, "reference has one implementation"
    check_against_openapi(rec["params"], "RunRecordParams")


def test_unknown_parameter_message_lists_impl(api):
    err = error_of(api.run({"backend": "flash", "implementation": "tma"}))
    assert err["code"] == "unknown_parameter" and "impl" in err["message"].split("known: ")[1], err


def test_openapi_documents_impl(api):
    doc = load_doc()
    names = sorted({i["name"] for v in variants(api).values() for i in v["impls"]})
    sc = doc["components"]["schemas"]
    for schema in ("RunParams", "RunRecordParams"):
        impl = sc[schema]["properties"]["impl"]
        assert impl["type"] == "string" and sorted(impl["enum"]) == names, (schema, impl)
    assert "impl" not in sc["RunRecordParams"]["required"], "absent params.impl means the default"
    assert sorted(sc["Run"]["properties"]["impl_used"]["enum"]) == names
    assert "impl_used" not in sc["Run"]["required"]
    assert "impls" in sc["Variant"]["required"]
    for path in ("/v1/runs", "/run"):
        query = {p["name"]: p for p in doc["paths"][path]["post"]["parameters"]}
        assert sorted(query["impl"]["schema"]["enum"]) == names, path
    # A stored params object naming an implementation fits the record's schema.
    params = api.run(body=tiny()).json()["params"]
    for name in names:
        check_against_openapi(dict(params, impl=name), "RunRecordParams")
