"""The `flashinfer` variant (FlashInfer's kernels through attnd's module, docs/flashinfer.md)
against the fp64 reference: each route (decode over the paged view, CUDA-core up to 4 query
heads per K/V head and tensor-core above, as vLLM chooses; the Hopper or FA2 single-request
prefill) on odd sizes, both dtypes, every mask it takes, head dims 64, 128 and
256, grouped K/V heads; what it refuses, by name; its library and engine in the record; its
kernels counted by CUPTI like every variant's. Skipped, with the reason, where the module is
not built (make flashinfer; scripts/gpu-build.sh builds it)."""
import pytest

from attnd_gpu_helpers import error_of, fact, fresh_seed, need_variant
from test_variants import check_verified, shape_id

TC_GROUP = 4  # kernels/flashinfer/flashinfer_layout.h ATTND_FI_TC_GROUP: vLLM's use_tensor_cores rule

# (name, shape): decode at group sizes of both decode routes (1 to 4: the CUDA-core decode; 5,
# 6 and 8: the tensor-core decode, FA2's batch prefill over the pages), a cache of one key, lengths that are no multiple of its 16-key
# pages, many sequences and few long ones (split-KV); prefill square, Sq < Skv (chunked
# prefill, and top-left causal over the first seq_q keys), one CTA's worth and odd sizes,
# batch > 1 (one call per sequence).
CASES = [
    ("decode_mha", dict(batch=3, heads=4, seq_q=1, seq_kv=1000)),
    ("decode_gqa4", dict(batch=5, heads=8, kv_heads=2, seq_q=1, seq_kv=777)),
    ("decode_gqa8_long", dict(batch=2, heads=16, kv_heads=2, seq_q=1, seq_kv=8191)),
    ("decode_mqa", dict(batch=2, heads=6, kv_heads=1, seq_q=1, seq_kv=129)),
    ("decode_one_key", dict(batch=2, heads=4, kv_heads=2, seq_q=1, seq_kv=1)),
    ("decode_group5_tc", dict(batch=2, heads=10, kv_heads=2, seq_q=1, seq_kv=300)),
    ("decode_gqa8_b8", dict(batch=8, heads=64, kv_heads=8, seq_q=1, seq_kv=4099)),
    ("decode_many", dict(batch=64, heads=8, kv_heads=8, seq_q=1, seq_kv=33)),
    ("prefill_square", dict(batch=1, heads=2, seq_q=1000, seq_kv=1000)),
    ("prefill_odd", dict(batch=2, heads=3, seq_q=77, seq_kv=130)),
    ("prefill_gqa", dict(batch=2, heads=8, kv_heads=2, seq_q=300, seq_kv=300)),
    ("prefill_chunk", dict(batch=3, heads=4, kv_heads=4, seq_q=129, seq_kv=1100)),
    ("prefill_two_rows", dict(batch=2, heads=2, seq_q=2, seq_kv=65)),
]
MASKS = ["none", "causal", "causal_bottom_right"]
HEAD_DIMS = [64, 128, 256]


@pytest.fixture(scope="module")
def fi(variants):
    return need_variant(variants, "flashinfer")


@pytest.mark.parametrize("name,shape", CASES, ids=[c[0] for c in CASES])
def test_matches_the_reference(gapi, fi, name, shape):
    failures = []
    for i, (dtype, mask) in enumerate((d, m) for d in ("bf16", "fp16") for m in MASKS):
        d = HEAD_DIMS[(i + CASES.index((name, shape))) % len(HEAD_DIMS)]  # every head dim meets every case
        s = dict(shape, head_dim=d)
        r = gapi.run(params=dict(backend="flashinfer", device="cuda:0", dtype=dtype, mask=mask, seed=fresh_seed(),
                                 warmup=1, iters=2, verify="true", profile="true", **s))
        what = "%s %s %s D%d" % (name, dtype, mask, d)
        if r.status_code != 200:
            failures.append("%s: HTTP %d %s" % (what, r.status_code, r.text[:400]))
            continue
        rec = r.json()
        try:
            check_verified(rec, s, dtype)
        except AssertionError as exc:
            failures.append("%s: %s" % (what, str(exc)[:400]))
            continue
        k = rec["kernels"]
        assert rec["library"]["name"] == "FlashInfer" and rec["library"]["version"], rec["library"]
        engine = rec.get("engine") or ""
        group = s["heads"] // s.get("kv_heads", s["heads"])
        route = "SinglePrefill" if s["seq_q"] > 1 else \
            "BatchPrefillWithPagedKVCacheDispatched" if group > TC_GROUP else "BatchDecodeWithPagedKVCacheDispatched"
        if route not in engine:
            failures.append("%s: engine %r does not name %s" % (what, engine, route))
        assert not any(t["kind"] == "memcpy" for t in k["table"]), k["table"]
        fact("flashinfer %s kernels" % what, "%d: %s | %s rel_l2 %.2e" % (
            k["per_forward"], ", ".join(t["name"][:50] for t in k["table"] if t["kind"] == "kernel"), engine[:80],
            rec["verify"]["rel_l2_err"]))
    assert not failures, "\n".join(failures)


def test_kernels_per_forward_as_measured(gapi, fi):
    """Decode: the decode kernel (CUDA-core for a group of 4, the batch prefill kernel for a
    group of 8), plus a merge kernel when the plan splits the cache (one long sequence: it
    does); prefill: one kernel per sequence (sm90), plus attnd's transpose (FA2, 8.x)."""
    for kv_heads, kernel in ((2, "BatchDecodeWithPagedKVCacheKernel"), (1, "BatchPrefillWithPagedKVCacheKernel")):
        rec = gapi.run_ok(backend="flashinfer", device="cuda:0", dtype="bf16", batch=1, heads=8, kv_heads=kv_heads,
                          seq_q=1, seq_kv=32768, head_dim=128, iters=2, profile="true", seed=fresh_seed(),
                          verify="true")
        names = [t["name"] for t in rec["kernels"]["table"] if t["kind"] == "kernel"]
        assert any(kernel in n for n in names), names
        if "split-KV" in (rec.get("engine") or ""):
            assert any("MergeStates" in n for n in names), names
        fact("flashinfer split decode, group %d" % (8 // kv_heads), "%s: %s" % (rec.get("engine"), names))
    rec = gapi.run_ok(backend="flashinfer", device="cuda:0", dtype="bf16", batch=3, heads=4, seq=512, head_dim=128,
                      mask="causal", iters=2, profile="true", seed=fresh_seed())
    per = rec["kernels"]["per_forward"]
    assert per in (3, 4), "3 sequences: 3 prefill calls (+1 transpose on FA2): %r" % rec["kernels"]["table"]


def test_gqa8_decode_as_vllm_runs_it(gapi, fi):
    """The shape that showed the gap (B8 H64 Hkv8 Skv32768, group 8): vLLM's FlashInfer backend
    would run the tensor-core decode here, so attnd does; verified, and the kernel table names
    the batch prefill kernel. The time is reported, not judged."""
    rec = gapi.run_ok(backend="flashinfer", device="cuda:0", dtype="bf16", batch=8, heads=64, kv_heads=8, seq_q=1,
                      seq_kv=32768, head_dim=128, iters=20, profile="true", seed=fresh_seed(), verify="true")
    names = [t["name"] for t in rec["kernels"]["table"] if t["kind"] == "kernel"]
    assert rec["verify"]["pass"], rec["verify"]
    assert "BatchPrefillWithPagedKVCacheDispatched" in (rec.get("engine") or ""), rec.get("engine")
    assert any("BatchPrefillWithPagedKVCacheKernel" in n for n in names), names
    assert not any("BatchDecodeWithPagedKVCacheKernel" in n for n in names), names
    fact("flashinfer B8 H64/8 Skv32768 decode", "%.1f us: %s | %s" % (rec["timing"]["median_us"], names,
                                                                      rec.get("engine")))


@pytest.mark.parametrize("mask", ["causal", "causal_bottom_right"])
def test_refuses_more_queries_than_keys_under_causal(gapi, fi, mask):
    r = gapi.run(params=dict(backend="flashinfer", device="cuda:0", dtype="bf16", batch=1, heads=2, seq_q=130,
                             seq_kv=77, head_dim=64, mask=mask, iters=1))
    err = error_of(r)
    assert r.status_code == 422 and "seq_q <= seq_kv" in err["message"], (r.status_code, err)


def test_same_output_as_flash(gapi, fi, variants):
    """Two independent kernels on one seeded input: their outputs agree within bf16 rounding
    (both verified against the reference above; this catches a layout mix-up that the
    reference would too, on the study's shape)."""
    need_variant(variants, "flash")
    shape = dict(device="cuda:0", dtype="bf16", batch=2, heads=16, kv_heads=4, seq=1024, head_dim=128,
                 mask="causal", seed=12345, iters=2, verify="true")
    a = gapi.run_ok(backend="flashinfer", **shape)
    b = gapi.run_ok(backend="flash", **shape) if "kv_heads" in variants["flash"]["features"] else None
    assert a["verify"]["pass"], a["verify"]
    if b is not None:
        fact("flashinfer vs flash fingerprints", "%s %s" % (a["output"]["fingerprint"], b["output"]["fingerprint"]))
    fact("flashinfer study-like shape", "%s: %.1f us" % (shape_id(dict(batch=2, heads=16, seq_q=1024, seq_kv=1024,
                                                                         head_dim=128)),
                                                         a["timing"]["median_us"]))
