"""The fused variants (efficient, flash, cudnn) as their contract asks: every dtype, mask and
a spread of head dims each declares, on the odd sizes (S=1, S=1000, S=4097, seq_q ≠ seq_kv
both ways), against the fp64 reference (the GPU fp32 math path above the cpu limit); one
kernel per forward, any memop a memset (cuDNN's workspace), never a memcpy.

nan == 0 proves every element was written: the worker poisons the output with NaN bytes
before the profiled forward whose output it summarises (server/worker/gpu_job.h)."""
import pytest

from attnd_gpu_helpers import fact, fresh_seed, need_variant
from test_variants import check_verified, shape_id

FUSED = ["efficient", "flash", "cudnn"]
SHAPES = [
    dict(batch=2, heads=3, seq_q=1, seq_kv=1),
    dict(batch=1, heads=2, seq_q=1000, seq_kv=1000),
    dict(batch=1, heads=2, seq_q=4097, seq_kv=4097),
    dict(batch=2, heads=3, seq_q=77, seq_kv=130),
    dict(batch=2, heads=3, seq_q=130, seq_kv=77),
]
WANTED_HEAD_DIMS = [8, 32, 40, 64, 72, 96, 128, 200, 256]


def head_dims(v):
    """The wanted head dims within v's declared limits."""
    hd = v.get("head_dim") or {}
    mx, mult = hd.get("max") or 0, hd.get("multiple") or 1
    return [d for d in WANTED_HEAD_DIMS if (not mx or d <= mx) and d % mult == 0]


def check_one_kernel(rec):
    k = rec["kernels"]
    assert k is not None, "profile=true gave no kernel table"
    assert k["per_forward"] == 1, "%d kernels per forward: %r" % (k["per_forward"], [r["name"] for r in k["table"]])
    memops = [r for r in k["table"] if r["kind"] != "kernel"]
    assert all(r["kind"] == "memset" for r in memops), memops
    assert k["memops_per_forward"] == sum(r["calls"] for r in memops)


@pytest.mark.parametrize("variant", FUSED)
def test_fused_matches_reference(gapi, variants, variant):
    v = need_variant(variants, variant)
    dims = head_dims(v)
    assert dims, "no head dim of %r within %r" % (WANTED_HEAD_DIMS, v.get("head_dim"))
    failures, runs, refused = [], 0, 0
    for dtype in v["dtypes"]:
        for mask in v["masks"]:
            for i, s in enumerate(SHAPES):
                # every head dim meets every shape across the dtype × mask loop
                d = dims[(i + 3 * v["dtypes"].index(dtype) + v["masks"].index(mask)) % len(dims)]
                shape = dict(s, head_dim=d)
                what = "%s %s %s %s" % (variant, dtype, mask, shape_id(shape))
                r = gapi.run(params=dict(backend=variant, device="cuda:0", dtype=dtype, mask=mask,
                                         seed=fresh_seed(), warmup=1, iters=2, verify="true", **shape))
                if r.status_code == 422 and mask == "causal_bottom_right" and s["seq_q"] > s["seq_kv"]:
                    refused += 1  # a declared limit (cudnn: no fully masked rows), named in the 422
                    continue
                if r.status_code != 200:
                    failures.append("%s: HTTP %d %s" % (what, r.status_code, r.text[:300]))
                    continue
                runs += 1
                try:
                    rec = r.json()
                    check_verified(rec, shape, dtype)
                    check_one_kernel(rec)
                except AssertionError as exc:
                    failures.append("%s: %s" % (what, str(exc)[:300]))
    fact("%s fused checks" % variant, "%d runs verified, %d refused by a declared limit" % (runs, refused))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("variant", FUSED)
def test_fused_refuses_outside_limits(gapi, variants, variant):
    """A head_dim outside the declared limits is a 422 that names head_dim."""
    v = need_variant(variants, variant)
    hd = v.get("head_dim") or {}
    bad = (hd.get("max") or 256) + (hd.get("multiple") or 8)
    r = gapi.run(params=dict(backend=variant, device="cuda:0", dtype=v["dtypes"][0], batch=1, heads=1, seq=16,
                             head_dim=bad, iters=1))
    assert r.status_code == 422, r.text[:300]
    assert "head_dim" in r.json()["error"]["message"], r.text[:300]


def test_cudnn_refuses_a_negative_scale(gapi, variants):
    """cuDNN's fused SDPA answered NaN for scale -0.3 (fused_check's cudnn row, H200, 9.19):
    the variant refuses it instead of returning a wrong output; flash and efficient run it."""
    need_variant(variants, "cudnn")
    shape = dict(device="cuda:0", dtype="bf16", batch=1, heads=2, seq_q=300, seq_kv=260, head_dim=64, iters=1,
                 warmup=0, scale=-0.3)
    r = gapi.run(params=dict(shape, backend="cudnn"))
    assert r.status_code == 422 and "positive scale" in r.json()["error"]["message"], r.text[:300]
    rec = gapi.run_ok(backend="flash", verify="true", seed=fresh_seed(), **shape)
    assert rec["verify"]["pass"] is True and rec["output"]["nan"] == 0, rec["verify"]
