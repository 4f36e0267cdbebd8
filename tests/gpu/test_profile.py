"""The kernel table (CUPTI, one profiled forward) says what each variant really launches:
the study's cost structure, measured, never declared."""
import pytest

from attnd_gpu_helpers import STUDY, fact, fresh_seed, need_variant

TENSOR_CORE_PATTERNS = ["hmma", "gmma", "wgmma", "tf32", "nvjet", "bf16", "f16f16", "s16816", "tensorop"]
GEMM_PATTERNS = ["gemm", "sgemm", "xmma"]

_cache = {}


def study_run(gapi, variant, **over):
    """One profiled run of the study shape per variant (cached: several tests read it)."""
    key = (variant, tuple(sorted(over.items())))
    if key not in _cache:
        params = dict(STUDY, backend=variant, seed=fresh_seed(), warmup=2, iters=5, profile="true")
        params.update(over)
        _cache[key] = gapi.run_ok(**params)
    return _cache[key]


def rows(rec, kind):
    return [r for r in rec["kernels"]["table"] if r["kind"] == kind]


def check_table(rec):
    k = rec["kernels"]
    assert k is not None, "a GPU run must have a kernel table"
    assert k["dropped"] == 0, "CUPTI dropped %d records: the table is incomplete" % k["dropped"]
    table = k["table"]
    assert table, "empty kernel table"
    kernel_calls = sum(r["calls"] for r in table if r["kind"] == "kernel")
    memop_calls = sum(r["calls"] for r in table if r["kind"] in ("memcpy", "memset"))
    assert kernel_calls == k["per_forward"], (kernel_calls, k["per_forward"])
    assert memop_calls == k["memops_per_forward"], (memop_calls, k["memops_per_forward"])
    for r in table:
        assert r["kind"] in ("kernel", "memcpy", "memset"), r
        assert r["name"] and r["calls"] >= 1 and r["gpu_us"] >= 0, r
        assert isinstance(r["launch_api"], str) and r["launch_api"], r
        if r["kind"] == "kernel":
            assert len(r["grid"]) == 3 and all(g >= 1 for g in r["grid"]), r
            assert len(r["block"]) == 3 and all(b >= 1 for b in r["block"]), r
            assert r["regs"] >= 1, r
            assert r["smem"]["static"] >= 0 and r["smem"]["dynamic"] >= 0, r
            assert 0 < r["occupancy"] <= 1, r
        else:
            assert r["bytes"] > 0, r
    assert k["gpu_us"] > 0
    # The study's variants launch one after another on one stream: their union is their sum.
    assert k["gpu_us"] == pytest.approx(sum(r["gpu_us"] for r in table), rel=1e-3, abs=0.01)


@pytest.mark.parametrize("variant", ["naive", "naive_inplace", "math"])
def test_table_consistent(gapi, variants, variant):
    need_variant(variants, variant)
    rec = study_run(gapi, variant)
    check_table(rec)
    k = rec["kernels"]
    fact("%s kernels+memops" % variant, "%d+%d" % (k["per_forward"], k["memops_per_forward"]))
    fact("%s table" % variant, ["%s x%d %s" % (r["kind"], r["calls"], r["name"][:60]) for r in k["table"]])


def test_naive_copies_inplace_does_not(gapi, variants):
    need_variant(variants, "naive")
    need_variant(variants, "naive_inplace")
    a, b = study_run(gapi, "naive"), study_run(gapi, "naive_inplace")
    copies = rows(a, "memcpy")
    assert len(copies) == 1 and copies[0]["calls"] == 1, "naive: want one DtoD memcpy, got %r" % copies
    assert "dtod" in copies[0]["name"].lower(), copies[0]
    # masked_fill copies the scaled scores: B·H·Sq·Skv elements of the input dtype.
    scores_bytes = STUDY["batch"] * STUDY["heads"] * STUDY["seq"] * STUDY["seq"] * 2
    assert copies[0]["bytes"] == scores_bytes, copies[0]
    assert rows(b, "memcpy") == [], "naive_inplace must not copy: %r" % rows(b, "memcpy")
    ka, kb = a["kernels"], b["kernels"]
    assert ka["per_forward"] == kb["per_forward"], (ka["per_forward"], kb["per_forward"])
    assert ka["memops_per_forward"] - kb["memops_per_forward"] == 1, (ka["memops_per_forward"],
                                                                      kb["memops_per_forward"])


def test_math_is_many_fp32_cuda_core_kernels(gapi, variants):
    need_variant(variants, "math")
    rec = study_run(gapi, "math")
    k = rec["kernels"]
    assert k["per_forward"] >= 15, "math launched %d kernels; SDPA's math path is ~20" % k["per_forward"]
    names = [r["name"].lower() for r in rows(rec, "kernel")]
    tc = [n for n in names if any(p in n for p in TENSOR_CORE_PATTERNS)]
    assert not tc, "math must not use tensor cores (its GEMMs are fp32 on CUDA cores): %r" % tc
    assert any(any(p in n for p in GEMM_PATTERNS) for n in names), "no GEMM-looking kernel in %r" % names


def test_naive_gemms_present(gapi, variants):
    need_variant(variants, "naive")
    rec = study_run(gapi, "naive")
    names = [r["name"].lower() for r in rows(rec, "kernel")]
    gemm_calls = sum(r["calls"] for r in rows(rec, "kernel")
                     if any(p in r["name"].lower() for p in GEMM_PATTERNS + ["nvjet"]))
    assert gemm_calls >= 2, "naive: want two cuBLAS GEMMs, kernels were %r" % names


def test_profile_false_has_no_table(gapi, variants):
    need_variant(variants, "naive")
    rec = gapi.run_ok(backend="naive", batch=1, heads=2, seq=64, head_dim=64, seed=fresh_seed(), iters=1,
                      profile="false")
    assert rec["kernels"] is None or rec["kernels"].get("table") in (None, [])
