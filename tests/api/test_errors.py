"""Refusals: each bad request gets the documented status and a JSON error naming the field,
and a refused request stores nothing."""
import pytest

from attnd_api_helpers import Api, error_of, tiny

DIMS = ["batch", "heads", "seq", "seq_q", "seq_kv", "head_dim"]


def refused(api, status, params=None, body=None, field=None, code=None):
    r = api.run(params=params, body=body)
    assert r.status_code == status, "expected %d for %r / %r, got %d: %s" % (status, params, body, r.status_code,
                                                                              r.text[:1000])
    err = error_of(r)
    if field is not None:
        assert err["field"] == field, err
    if code is not None:
        assert err["code"] == code, err
    return err


def test_malformed_json(api):
    for text in ('{"backend": "reference",', "not json", '{"backend": }', "[1, 2", '{"a":1}}'):
        r = api.post("/v1/runs", data=text, headers={"Content-Type": "application/json"})
        assert r.status_code == 400, (text, r.status_code, r.text[:500])
        assert error_of(r)["code"] == "bad_json", text


@pytest.mark.parametrize("body", ["[1, 2, 3]", '"reference"', "42", "null"])
def test_body_must_be_an_object(api, body):
    r = api.post("/v1/runs", data=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 400, (body, r.status_code, r.text[:500])
    error_of(r)


def test_missing_backend(api):
    refused(api, 400, params={"batch": 1}, field="backend")


def test_unknown_backend(api):
    refused(api, 400, params=tiny(backend="nope"), field="backend", code="unknown_backend")
    refused(api, 400, body=dict(tiny(), backend="flash_v9"), field="backend", code="unknown_backend")


def test_unknown_parameter(api):
    refused(api, 400, params=tiny(bogus=1), field="bogus", code="unknown_parameter")
    refused(api, 400, body=dict(tiny(), heads_per_group=2), field="heads_per_group", code="unknown_parameter")


def test_fault_is_unknown_without_the_flag(api):
    refused(api, 400, params=tiny(fault="crash"), field="fault", code="unknown_parameter")


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("value", ["0", "-1", "-4096", "abc", "1.5", "", "12abc", str(2 ** 31 + 1), str(2 ** 64),
                                   "99999999999999999999999"])
def test_bad_dims(api, dim, value):
    params = {k: v for k, v in tiny(seq_q=4, seq_kv=4).items() if k != "seq"}
    params[dim] = value
    if dim == "seq":
        params.pop("seq_q")
        params.pop("seq_kv")
    refused(api, 400, params=params, field=dim)


@pytest.mark.parametrize("dim", DIMS)
@pytest.mark.parametrize("value", [0, -3, 2.5, "abc", True, [4], {"n": 4}, 2 ** 70])
def test_bad_dims_in_json(api, dim, value):
    """In a JSON body: zero, negative, fractional, overflowing and non-numeric values."""
    body = {k: v for k, v in tiny(seq_q=4, seq_kv=4).items() if k != "seq"}
    if dim == "seq":
        body.pop("seq_q")
        body.pop("seq_kv")
    body[dim] = value
    refused(api, 400, body=body, field=dim)


def test_tensor_too_many_elements(api):
    """Each dim within bounds but the product past RUN_MAX_ELEMS (2^40): 400."""
    r = api.run(params=tiny(batch=2 ** 20, heads=2 ** 20, seq=2 ** 20, head_dim=2 ** 10))
    assert r.status_code == 400, r.text[:500]
    error_of(r)


@pytest.mark.parametrize("name,value", [
    ("iters", "-1"), ("iters", "100001"), ("iters", "x"),
    ("warmup", "-1"), ("warmup", "10001"),
    ("min_iters", "-5"), ("max_iters", "0"), ("max_iters", "100001"),
    ("min_time_ms", "-1"), ("max_time_ms", "600001"), ("max_time_ms", "nan"),
    ("target_noise", "-0.1"), ("target_noise", "inf"),
    ("dtype", "fp8"), ("dtype", "BF16x"), ("mask", "diagonal"), ("causal", "maybe"),
    ("cache", "warm"), ("graph", "perhaps"), ("verify", "2"), ("profile", "yes please"),
    ("scale", "abc"), ("scale", "nan"), ("scale", "inf"),
    ("seed", "-1"), ("seed", "x"), ("seed", str(2 ** 64)),
    ("device", "tpu"), ("device", "cuda:x"), ("device", "cuda:-1"),
])
def test_bad_values(api, name, value):
    refused(api, 400, params=tiny(**{name: value}), field=name)


def test_min_iters_above_max_iters(api):
    r = api.run(params=tiny(iters=None, min_iters=10, max_iters=5))
    assert r.status_code == 400, r.text[:500]
    assert error_of(r)["field"] in ("min_iters", "max_iters")


def test_seq_conflicts_with_seq_q(api):
    """seq sets both; together with a different seq_q it is contradictory, or seq_q wins.
    Either way never a 5xx."""
    r = api.run(params=tiny(seq=8, seq_q=4))
    assert r.status_code in (200, 400), r.text[:500]
    if r.status_code == 200:
        assert r.json()["params"]["seq_q"] in (4, 8)


def test_gpu_backend_without_gpu_503(api):
    for backend in ("naive", "naive_inplace", "math"):
        r = api.run(params=dict(backend=backend, batch=1, heads=1, seq=8, head_dim=8, iters=1))
        assert r.status_code == 503, (backend, r.status_code, r.text[:500])
        err = error_of(r)
        assert "gpu" in err["message"].lower(), err


def test_cpu_backend_on_gpu_device_422(api):
    """The backend/device mismatch is the client's error whatever this server has, so it is
    checked before whether cuda:0 exists: 422 naming the device."""
    err = refused(api, 422, params=tiny(device="cuda:0"))
    assert err["field"] == "device", err
    assert "cpu" in err["message"].lower(), err


def test_gpu_device_without_gpu_503(api):
    r = api.run(params=dict(backend="naive", device="cuda:0", batch=1, heads=1, seq=8, head_dim=8, iters=1))
    assert r.status_code == 503, r.text[:500]
    err = error_of(r)
    assert "gpu" in err["message"].lower() or "cuda" in err["message"].lower(), err


def test_gpu_backend_on_cpu_422(api):
    for backend in ("naive", "naive_inplace", "math"):
        err = refused(api, 422, params=dict(backend=backend, device="cpu", batch=1, heads=1, seq=8, head_dim=8,
                                            iters=1))
        assert err["field"] in ("device", "backend"), err


def test_gpu_only_options_on_cpu(api):
    """graph replays and CUPTI profiles need a GPU: refused (422) or ignored, never a 5xx."""
    for extra in ({"graph": "true"}, {"cache": "cold"}):
        r = api.run(params=tiny(**extra))
        assert r.status_code in (200, 422), (extra, r.status_code, r.text[:500])
        if r.status_code == 422:
            error_of(r)


def test_shape_too_large_for_memory_413(start_server):
    """Within the parse bounds (each tensor 2^39 elements, 1 TiB in bf16) but far beyond the
    machine's memory: 413 before anything is allocated, and the server goes on. (With the
    default cpu_max_macs such a run is refused 422 too_costly first: test_run_hardening.py.)"""
    api = Api(start_server(extra=["--cpu-threads", "2", "--cpu-max-macs", "0"]).url)
    r = api.run(params=tiny(batch=8192, heads=1024, seq=256, head_dim=256), timeout=60)
    assert r.status_code == 413, r.text[:500]
    error_of(r)
    assert api.get("/healthz").status_code == 200
    api.run_ok(**tiny())


def test_unknown_run_id_404(api):
    for rid in ("999999999",):
        r = api.get("/v1/runs/" + rid)
        assert r.status_code == 404, (rid, r.status_code, r.text[:500])
        error_of(r)
    for rid in ("0", "-1", "abc", "1x", "99999999999999999999999"):
        r = api.get("/v1/runs/" + rid)
        assert r.status_code in (400, 404), (rid, r.status_code, r.text[:500])
        error_of(r)


def test_refused_requests_store_nothing(api):
    """Between two stored runs, refused requests leave no retrievable record: every id in
    between answers 404."""
    first = api.run_ok(**tiny(seed=21))["id"]
    bad = [
        dict(params=tiny(batch=0)), dict(params=tiny(backend="nope")), dict(params=tiny(bogus=1)),
        dict(params=tiny(backend="naive", device="cpu")), dict(params=tiny(device="cuda:0")),
        dict(params=tiny(batch=8192, heads=1024, seq=256, head_dim=256)), dict(params={"backend": "naive"}),
    ]
    for b in bad:
        r = api.run(**b)
        assert 400 <= r.status_code < 500 or r.status_code == 503, (b, r.status_code)
    r = api.post("/v1/runs", data="{oops", headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    last = api.run_ok(**tiny(seed=22))["id"]
    assert last > first
    for rid in range(first + 1, last):
        r = api.get("/v1/runs/%d" % rid)
        assert r.status_code == 404, "run %d exists after only refused requests: %s" % (rid, r.text[:500])
    assert api.get("/v1/runs/%d" % first).status_code == 200
