"""What each variant offers (GET /v1/variants' features) and how the front answers the rest: an
offered feature gets as far as the device (503 on this GPU-less machine), a limit of the kernel is
a 422 naming it. Features whose kernels are written but not yet validated on a GPU would be
listed as pending_features and offered only with the pending_features setting; none is today."""
from attnd_api_helpers import Api

GQA_RUN = {"backend": "flash", "dtype": "bf16", "heads": 4, "kv_heads": 2, "head_dim": 64, "seq": 64}


def variant(api, name):
    (v,) = [v for v in api.get("/v1/variants").json()["variants"] if v["name"] == name]
    return v


def test_validated_features_are_offered(api):
    """flash and efficient run grouped K/V heads, windows and a value head dim of their own
    (validated on the H200): offered without the setting, as far as the device (none here); a
    value head dim past the kernels' limits is refused by the variant's own check."""
    for name in ("flash", "efficient"):
        v = variant(api, name)
        assert {"kv_heads", "window", "head_dim_v"} <= set(v["features"]), v
    for body in (GQA_RUN, dict(GQA_RUN, kv_heads=4, window=16), dict(GQA_RUN, head_dim=192, head_dim_v=128),
                 dict(GQA_RUN, backend="efficient", dtype="fp32", window=16)):
        r = api.post("/v1/runs", json=body)
        assert r.status_code == 503 and r.json()["error"]["code"] == "no_device", r.text
    r = api.post("/v1/runs", json=dict(GQA_RUN, head_dim_v=36))
    assert r.status_code == 422 and "head_dim_v" in r.json()["error"]["message"], r.text


SERVING = [({"seqlens_kv": [3, 0, 4], "seqlens_q": "1,0,1"}, "seqlens_kv"), ({"seqlens_q": "3,4"}, "seqlens_q"),
           ({"page_size": 16, "seq_kv": 33}, "page_size"),
           ({"page_size": 1, "seqlens_kv": [5, 1], "num_pages": 9}, "seqlens_kv")]
PADDED_ROUTE = ("naive", "naive_inplace", "math")


def test_padded_route_is_offered(api):
    """naive, naive_inplace and math take paged and ragged batches by PyTorch's padded route
    (validated on an H100: output, twins and kernel counts against torch.profiler): offered
    without the setting, as far as the device (none here)."""
    for name in PADDED_ROUTE:
        v = variant(api, name)
        assert {"page_size", "seqlens"} <= set(v["features"]) and v["pending_features"] == [], v
        for extra, _ in SERVING:
            body = dict({"backend": name, "dtype": "bf16", "heads": 4, "kv_heads": 2, "head_dim": 64}, **extra)
            r = api.post("/v1/runs", json=body)
            assert r.status_code == 503 and r.json()["error"]["code"] == "no_device", (name, extra, r.text)


def test_nothing_is_pending(api, start_server):
    """Every feature a kernel has is validated: no variant lists pending ones, and the setting that
    would offer them changes no variant's features."""
    listed = {v["name"]: v for v in api.get("/v1/variants").json()["variants"]}
    assert all(v["pending_features"] == [] for v in listed.values()), listed
    offering = Api(start_server(extra=["--pending-features", "true"]).url)
    for v in offering.get("/v1/variants").json()["variants"]:
        assert v["features"] == listed[v["name"]]["features"] and v["pending_features"] == [], v


def test_cudnn_and_efficient_serving_are_offered(api):
    """cudnn builds paged caches (PAGED_CACHE_LOAD) and ragged batches (ragged offsets, padding
    mask) into its graph, efficient runs them in its 16-bit kernel's SERVING instantiation (both
    validated on an H100): offered, as far as the device (503 here); efficient refuses fp32 by its
    reason."""
    for name in ("cudnn", "efficient"):
        v = variant(api, name)
        assert {"page_size", "seqlens"} <= set(v["features"]), v
        for extra, _ in SERVING:
            body = dict({"backend": name, "dtype": "bf16", "heads": 4, "kv_heads": 2, "head_dim": 64}, **extra)
            r = api.post("/v1/runs", json=body)
            assert r.status_code == 503 and r.json()["error"]["code"] == "no_device", (name, extra, r.text)
    r = api.post("/v1/runs", json={"backend": "efficient", "dtype": "fp32", "head_dim": 64, "seqlens_q": [3, 4]})
    assert r.status_code == 422 and "16-bit" in r.json()["error"]["message"], r.text


def test_flash_serving_is_offered(api):
    """flash runs paged and ragged decode batches in its split-KV kernel and their prefill
    (seq_q above 16) in v6's SERVING kernel (both validated on a GPU): offered without the
    setting (503 here: no GPU); another impl is refused by the kernel's own reason."""
    assert {"page_size", "seqlens"} <= set(variant(api, "flash")["features"])
    decode = {"backend": "flash", "dtype": "bf16", "heads": 8, "kv_heads": 2, "head_dim": 128, "seq_q": 1}
    paged = dict(decode, page_size=16, seq_kv=100)
    for extra in ({"page_size": 16, "seq_kv": 100}, {"seqlens_kv": [5, 0, 300]},
                  {"seqlens_q": [1, 4, 16], "seqlens_kv": [30, 4, 300], "page_size": 1},
                  {"seq_q": 17, "seqlens_q": [1, 17], "seqlens_kv": [30, 40]}):
        body = dict(decode, **extra)
        if "seqlens_q" in extra and "seq_q" not in extra:
            del body["seq_q"]  # the longest sequence's
        r = api.post("/v1/runs", json=body)
        assert r.status_code == 503 and r.json()["error"]["code"] == "no_device", (extra, r.text)
    r = api.post("/v1/runs", json=dict(paged, impl="w4"))
    assert r.status_code == 422 and "not impl w4" in r.json()["error"]["message"], r.text


CUDNN_RUN = {"backend": "cudnn", "dtype": "bf16", "heads": 8, "kv_heads": 2, "head_dim": 128}


def test_cudnn_serving_limits(api):
    """cudnn's serving batches reach the device (503 here) wherever the front can tell cuDNN runs
    them: paged decode and prefill, ragged prefill with bounds seq_q > seq_kv under bottom-right
    and a window (the padding mask makes those per sequence: the worker checks each); a page size
    that is not a power of 2 and ragged offsets past INT32 are 422 with the reason, as is fp32."""
    for extra in ({"seq_q": 1, "page_size": 16, "seq_kv": 33}, {"seq_q": 4, "page_size": 1, "seq_kv": 70},
                  {"seqlens_q": [5, 0, 1], "seqlens_kv": [9, 0, 17], "page_size": 16},
                  {"seqlens_q": [40, 2], "seqlens_kv": [50, 30], "mask": "causal_bottom_right", "window": 8},
                  {"seqlens_q": [5, 0, 1], "seqlens_kv": [9, 0, 17], "head_dim_v": 64}):
        r = api.post("/v1/runs", json=dict(CUDNN_RUN, **extra))
        assert r.status_code == 503 and r.json()["error"]["code"] == "no_device", (extra, r.text)
    for extra, words in (({"page_size": 48, "seq_kv": 100}, "power of 2"),
                         ({"seqlens_q": [70000, 70000], "seqlens_kv": [9, 9], "heads": 128}, "2^31"),
                         ({"dtype": "fp32", "page_size": 16, "seq_kv": 33}, "dtype")):
        r = api.post("/v1/runs", json=dict(CUDNN_RUN, **extra))
        err = r.json()["error"]
        assert r.status_code == 422 and err["code"] == "unsupported" and words in err["message"], (extra, r.text)


def test_flash_prefill_limits(api):
    """flash's paged and ragged prefill (v6's SERVING kernel, v3's with impl legacy: any head dim
    and page size) gets as far as the device (503 here); for v6, pages that split a 128-key block
    and head dims it does not serve are refused with the reason, as is an impl with no serving
    kernel; decode (seq_q up to 16) still takes any page size."""
    run = {"backend": "flash", "dtype": "bf16", "heads": 8, "kv_heads": 2, "head_dim": 128}
    for extra in ({"seqlens_q": [1, 0, 130, 1000], "seqlens_kv": [1, 0, 130, 1000]},
                  {"seqlens_q": [40, 17], "seqlens_kv": [100, 300], "page_size": 256},
                  {"batch": 2, "seq_q": 200, "seq_kv": 700, "page_size": 128},
                  {"seqlens_q": [1, 16], "seqlens_kv": [100, 300], "page_size": 16},
                  {"seqlens_q": [40, 17], "seqlens_kv": [100, 300], "page_size": 16, "head_dim": 96,
                   "impl": "legacy"}):
        r = api.post("/v1/runs", json=dict(run, **extra))
        assert r.status_code == 503 and r.json()["error"]["code"] == "no_device", (extra, r.text)
    for extra, words in (({"seqlens_q": [40, 17], "seqlens_kv": [100, 300], "page_size": 16},
                          "page_size a multiple of 128"),
                         ({"seqlens_q": [40, 17], "impl": "wgmma"}, "not impl wgmma"),
                         ({"seqlens_q": [40, 17], "impl": "w4"}, "not impl w4"),
                         ({"seqlens_q": [40, 17], "head_dim": 96}, "head_dim 64 and 128")):
        r = api.post("/v1/runs", json=dict(run, **extra))
        assert r.status_code == 422 and words in r.json()["error"]["message"], (extra, r.text)


FI_RUN = {"backend": "flashinfer", "dtype": "bf16", "heads": 8, "kv_heads": 2, "head_dim": 128}
# paged decode, ragged decode, ragged prefill, paged prefill (a speculative decode; a chunked prefill)
FI_SERVING = [({"seq_q": 1, "page_size": 16, "seq_kv": 33}, "page_size"),
              ({"seq_q": 1, "page_size": 1, "seqlens_kv": [5, 1], "num_pages": 9}, "seqlens_kv"),
              ({"seqlens_q": [5, 0, 1], "seqlens_kv": [9, 0, 17]}, "seqlens_kv"),
              ({"seq_q": 4, "seq_kv": 64, "page_size": 16}, "page_size"),
              ({"seqlens_q": [130, 2], "seqlens_kv": [1100, 9], "page_size": 64}, "page_size")]


def test_flashinfer_serving_batches_are_offered(api):
    """flashinfer's paged and ragged batches (kernels/flashinfer/, validated on the H200) get as
    far as the device (503 here): the module, not the front, says what a card runs."""
    assert {"page_size", "seqlens"} <= set(variant(api, "flashinfer")["features"])
    for extra, _ in FI_SERVING:
        r = api.post("/v1/runs", json=dict(FI_RUN, **extra))
        assert r.status_code == 503 and r.json()["error"]["code"] == "no_device", (extra, r.text)
