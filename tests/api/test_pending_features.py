"""Features whose kernels are written but not yet validated on a GPU (variant_info's
pending_features): listed by GET /v1/variants, refused 422 naming the field, and offered only
by a server started with the pending_features setting, as the GPU session that validates them
starts it. On this GPU-less machine an offered feature gets as far as the device (503)."""
from attnd_api_helpers import Api

GQA_RUN = {"backend": "flash", "dtype": "bf16", "heads": 4, "kv_heads": 2, "head_dim": 64, "seq": 64}


def variant(api, name):
    (v,) = [v for v in api.get("/v1/variants").json()["variants"] if v["name"] == name]
    return v


def test_pending_features_are_listed_and_refused(api):
    for name in ("flash", "efficient"):
        v = variant(api, name)
        assert {"kv_heads", "window"} <= set(v["pending_features"]), v
        assert not {"kv_heads", "window"} & set(v["features"]), v
    assert variant(api, "cudnn")["pending_features"] == []
    for extra, field in (({}, "kv_heads"), ({"kv_heads": 4, "window": 16}, "window")):
        r = api.post("/v1/runs", json=dict(GQA_RUN, **extra))
        assert r.status_code == 422, r.text
        err = r.json()["error"]
        assert err["code"] == "unsupported" and err["field"] == field, err


def test_the_setting_offers_them(start_server):
    api = Api(start_server(extra=["--pending-features", "true"]).url)
    v = variant(api, "flash")
    assert {"kv_heads", "window"} <= set(v["features"]) and "head_dim_v" not in v["features"], v
    for extra in ({}, {"kv_heads": 4, "window": 16}):
        r = api.post("/v1/runs", json=dict(GQA_RUN, **extra))
        assert r.status_code == 503 and r.json()["error"]["code"] == "no_device", r.text
    r = api.post("/v1/runs", json=dict(GQA_RUN, head_dim_v=32))  # not pending: still refused
    assert r.status_code == 422 and r.json()["error"]["field"] == "head_dim_v", r.text
