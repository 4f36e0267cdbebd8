"""Every GPU variant against the fp64 reference, on small and odd shapes, every dtype, with
and without the causal mask; fresh seeds every run.

nan == 0 also proves the variant wrote every output element: the worker fills the output
with NaN bytes before the profiled forward whose output is summarised (server/worker/gpu_job.h)."""
import pytest

from attnd_gpu_helpers import (GPU_VARIANTS, STUDY, VERIFY_CPU_MAX_MACS, fact, fresh_seed, macs, need_variant)

DTYPES = ["bf16", "fp16", "fp32"]
MASKS = ["none", "causal"]
SHAPES = [
    dict(batch=2, heads=3, seq_q=1, seq_kv=1, head_dim=64),
    dict(batch=2, heads=3, seq_q=63, seq_kv=63, head_dim=8),
    dict(batch=2, heads=3, seq_q=1000, seq_kv=1000, head_dim=100),
    dict(batch=2, heads=3, seq_q=77, seq_kv=130, head_dim=128),
    dict(batch=1, heads=2, seq_q=130, seq_kv=130, head_dim=64),
]


def shape_id(s):
    return "B%dH%dSq%dSkv%dD%d" % (s["batch"], s["heads"], s["seq_q"], s["seq_kv"], s["head_dim"])


def expected_reference(s):
    return "cpu_fp64" if macs(s["batch"], s["heads"], s["seq_q"], s["seq_kv"], s["head_dim"]) <= VERIFY_CPU_MAX_MACS \
        else "gpu_math_fp32"


def check_verified(rec, shape, dtype):
    out, v = rec["output"], rec["verify"]
    assert out["shape"] == [shape["batch"], shape["heads"], shape["seq_q"], shape.get("head_dim_v", shape["head_dim"])]
    assert out["dtype"] == dtype
    assert out["nan"] == 0, "%d NaN in the output: an element was never written or overflowed" % out["nan"]
    assert out["inf"] == 0
    assert v is not None, "verify=true gave no verify object"
    assert v["reference"] == expected_reference(shape), v
    assert v["nan"] == 0
    assert v["pass"] is True, "verify failed: %r" % v
    assert v["max_abs_err"] <= v["tol"]["abs"] and v["rel_l2_err"] <= v["tol"]["rel_l2"], v


@pytest.mark.parametrize("shape", SHAPES, ids=shape_id)
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", GPU_VARIANTS)
def test_variant_matches_reference(gapi, variants, variant, dtype, mask, shape):
    v = need_variant(variants, variant)
    assert dtype in v["dtypes"] and mask in v["masks"], v
    rec = gapi.run_ok(backend=variant, dtype=dtype, mask=mask, seed=fresh_seed(), warmup=1, iters=2,
                      verify="true", **shape)
    assert rec["device"]["id"] == "cuda:0"
    assert rec["params"]["backend"] == variant
    check_verified(rec, shape, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", GPU_VARIANTS)
def test_bottom_right_short_queries(gapi, variants, variant, dtype):
    """causal_bottom_right with seq_q < seq_kv: no empty row, every variant verifies."""
    need_variant(variants, variant)
    shape = dict(batch=2, heads=3, seq_q=77, seq_kv=130, head_dim=64)
    rec = gapi.run_ok(backend=variant, dtype=dtype, mask="causal_bottom_right", seed=fresh_seed(), iters=2,
                      verify="true", **shape)
    check_verified(rec, shape, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("variant", GPU_VARIANTS)
def test_bottom_right_fully_masked_rows(gapi, variants, variant, dtype):
    """causal_bottom_right with seq_q > seq_kv leaves seq_q − seq_kv rows with no key.
    naive / naive_inplace softmax a row of −inf into NaN, exactly like PyTorch eager;
    math follows SDPA's safe softmax and gives zeros, which the reference agrees with."""
    need_variant(variants, variant)
    shape = dict(batch=2, heads=3, seq_q=130, seq_kv=77, head_dim=64)
    rec = gapi.run_ok(backend=variant, dtype=dtype, mask="causal_bottom_right", seed=fresh_seed(), iters=2,
                      verify="true", **shape)
    if variant == "math":
        check_verified(rec, shape, dtype)
        return
    empty_rows = shape["seq_q"] - shape["seq_kv"]
    want_nan = shape["batch"] * shape["heads"] * empty_rows * shape["head_dim"]
    assert rec["output"]["nan"] == want_nan, "expected NaN in exactly the %d fully masked rows: %r" % (
        empty_rows, rec["output"])
    if rec.get("verify") is not None:
        assert rec["verify"]["pass"] is False


@pytest.mark.parametrize("variant", GPU_VARIANTS)
def test_large_batch(gapi, variants, variant):
    need_variant(variants, variant)
    shape = dict(batch=64, heads=16, seq_q=128, seq_kv=128, head_dim=64)
    rec = gapi.run_ok(backend=variant, dtype="bf16", mask="causal", seed=fresh_seed(), iters=2, verify="true",
                      **shape)
    check_verified(rec, shape, "bf16")


@pytest.mark.parametrize("variant", GPU_VARIANTS)
def test_study_shape_verified(gapi, variants, variant):
    """The study's shape is above the cpu verify limit: checked against the GPU fp32 math."""
    need_variant(variants, variant)
    shape = dict(batch=8, heads=16, seq_q=1024, seq_kv=1024, head_dim=64)
    rec = gapi.run_ok(backend=variant, seed=fresh_seed(), iters=3, verify="true",
                      **{k: STUDY[k] for k in ("batch", "heads", "seq", "head_dim", "dtype", "mask")})
    check_verified(rec, shape, "bf16")
    assert rec["verify"]["reference"] == "gpu_math_fp32"
    fact("study %s rel_l2_err" % variant, rec["verify"]["rel_l2_err"])


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("variant", GPU_VARIANTS)
def test_fp32_is_true_fp32(gapi, variants, variant, mask):
    """fp32 without TF32: relative L2 error ~1e-7 (TF32 GEMMs give ~1e-3). Asserted for
    math (SDPA's math path is plain fp32); reported for the naive ones."""
    need_variant(variants, variant)
    shape = dict(batch=2, heads=3, seq_q=1000, seq_kv=1000, head_dim=64)
    rec = gapi.run_ok(backend=variant, dtype="fp32", mask=mask, seed=fresh_seed(), iters=2, verify="true", **shape)
    check_verified(rec, shape, "fp32")
    err = rec["verify"]["rel_l2_err"]
    fact("fp32 %s %s rel_l2_err" % (variant, mask), err)
    if variant == "math":
        assert err < 1e-5, "math fp32 rel_l2_err %.3g: TF32 or lower precision in the GEMMs?" % err


def test_fingerprint_deterministic(gapi, variants):
    """Same seed, same variant, twice: identical fingerprint (deterministic kernels);
    another seed: a different one."""
    need_variant(variants, "naive")
    seed = fresh_seed()
    p = dict(backend="naive", batch=2, heads=3, seq=257, head_dim=64, iters=2)
    a = gapi.run_ok(seed=seed, **p)["output"]
    b = gapi.run_ok(seed=seed, **p)["output"]
    c = gapi.run_ok(seed=fresh_seed(), **p)["output"]
    assert a["fingerprint"] == b["fingerprint"] and a["sum"] == b["sum"]
    assert a["fingerprint"] != c["fingerprint"]


def _head_dims(v, wanted):
    """The head dims of `wanted` the variant accepts (head_dim: {max, multiple})."""
    hd = v.get("head_dim") or {}
    mx, mult = hd.get("max") or 0, hd.get("multiple") or 1
    return [d for d in wanted if (not mx or d <= mx) and d % mult == 0]


def test_other_variants_match_reference(gapi, variants):
    """Variants beyond the study's decomposed three (cudnn, flash, … as they are added):
    every dtype and mask they declare, on shapes within their declared head_dim limits,
    verified against the reference; an undeclared dtype or head_dim is refused with 422."""
    others = [v for n, v in sorted(variants.items())
              if v["device"] == "cuda" and n not in GPU_VARIANTS and v["available"]]
    if not others:
        pytest.skip("no other available GPU variant")
    failures = []
    for v in others:
        dims = _head_dims(v, [8, 64, 100, 128])
        shapes = [dict(batch=2, heads=3, seq_q=1, seq_kv=1), dict(batch=2, heads=3, seq_q=63, seq_kv=63),
                  dict(batch=2, heads=3, seq_q=1000, seq_kv=1000), dict(batch=2, heads=3, seq_q=77, seq_kv=130)]
        for dtype in v["dtypes"]:
            for mask in v["masks"]:
                for i, s in enumerate(shapes):
                    shape = dict(s, head_dim=dims[i % len(dims)])
                    what = "%s %s %s %s" % (v["name"], dtype, mask, shape_id(shape))
                    r = gapi.run(params=dict(backend=v["name"], device="cuda:0", dtype=dtype, mask=mask,
                                             seed=fresh_seed(), iters=2, verify="true", **shape))
                    if r.status_code != 200:
                        failures.append("%s: HTTP %d %s" % (what, r.status_code, r.text[:200]))
                        continue
                    try:
                        check_verified(r.json(), shape, dtype)
                    except AssertionError as exc:
                        failures.append("%s: %s" % (what, str(exc)[:300]))
        fact("%s checked" % v["name"], "%d dtypes x %d masks x %d shapes" % (len(v["dtypes"]), len(v["masks"]),
                                                                             len(shapes)))
        bad_dtype = next((d for d in DTYPES if d not in v["dtypes"]), None)
        if bad_dtype:
            r = gapi.run(params=dict(backend=v["name"], device="cuda:0", dtype=bad_dtype, batch=1, heads=1, seq=16,
                                     head_dim=dims[0], iters=1))
            if r.status_code != 422:
                failures.append("%s dtype %s: want 422, got %d" % (v["name"], bad_dtype, r.status_code))
        hd = v.get("head_dim") or {}
        if (hd.get("multiple") or 1) > 1:
            odd = hd["multiple"] + 1
            r = gapi.run(params=dict(backend=v["name"], device="cuda:0", dtype=v["dtypes"][0], batch=1, heads=1,
                                     seq=16, head_dim=odd, iters=1))
            if r.status_code != 422:
                failures.append("%s head_dim %d: want 422, got %d" % (v["name"], odd, r.status_code))
    assert not failures, "\n".join(failures)
