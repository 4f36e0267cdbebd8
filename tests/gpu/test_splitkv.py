"""flash's split-KV decode (impl=splitkv, kernels/flash_splitkv.cu) through the API on a GPU:
decode and speculative-decode shapes verify against the reference, run the kernels it names
(one launch when the keys are not split, the split kernel and its combine when they are:
the profiled forward's kernel table) and report impl_used splitkv; grouped K/V heads run on a
server offering flash's GQA; seq_q above 16 is refused; paged caches and ragged batches run its
serving instantiation (the default impl for them); the split count is planned for the kernel
that runs. The timed comparison with cudnn is fused_check's (docs/fused.md, "Split-KV decode")."""
import math

import pytest

from attnd_gpu_helpers import error_of, fact, fresh_seed, need_variant, post_run_ok, server_offering, variant_features
from test_variants import check_verified

SPLIT, COMBINE = "flash_splitkv_kernel", "flash_splitkv_combine"


def kernel_names(rec):
    assert rec["kernels"] is not None, "profile=true gave no kernel table"
    return [r["name"] for r in rec["kernels"]["table"] if r["kind"] == "kernel"]


def runs_splitkv(api):
    v = {v["name"]: v for v in api.get("/v1/variants").json()["variants"]}["flash"]
    entry = next(i for i in v["impls"] if i["name"] == "splitkv")
    return "cuda:0" in entry["devices"]


def check_decode(api, shape, mask, dtype, kernels):
    params = dict(shape, backend="flash", impl="splitkv", mask=mask, dtype=dtype, seed=fresh_seed(), warmup=1,
                  iters=3, verify=True, profile=True, device="cuda:0")
    rec = post_run_ok(api, params)
    check_verified(rec, shape, dtype)
    assert rec["impl_used"] == "splitkv", rec.get("impl_used")
    names = kernel_names(rec)
    assert len(names) == len(kernels) and all(k in n for k, n in zip(kernels, names)), (kernels, names)
    # On sm_90+ the combine may start inside the split kernel (a dependent launch): the forward's
    # GPU time counts that overlap once, so it lies between the longest row and the rows' sum.
    k = rec["kernels"]
    row_us = [r["gpu_us"] for r in k["table"]]
    assert max(row_us) - 0.01 <= k["gpu_us"] <= sum(row_us) + 0.01, (k["gpu_us"], row_us)
    return rec


# (shape, kernels): seq_kv ≤ 256 is never split (one launch); a handful of K/V heads over a long
# cache always is (the split count fills the SMs); 16 query rows, 2 row tiles.
MHA = [
    (dict(batch=2, heads=8, seq_q=1, seq_kv=200, head_dim=128), [SPLIT]),
    (dict(batch=2, heads=8, seq_q=1, seq_kv=4097, head_dim=128), [SPLIT, COMBINE]),
    (dict(batch=3, heads=4, seq_q=16, seq_kv=1000, head_dim=64), [SPLIT, COMBINE]),
    (dict(batch=1, heads=2, seq_q=2, seq_kv=9000, head_dim=128), [SPLIT, COMBINE]),
]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("mask", ["none", "causal_bottom_right", "causal"])
@pytest.mark.parametrize("case", range(len(MHA)))
def test_splitkv_mha_decode(gapi, variants, case, mask, dtype):
    need_variant(variants, "flash")
    if not runs_splitkv(gapi):
        pytest.fail("cuda:0's worker does not run flash splitkv (it needs compute capability 8.0)")
    shape, kernels = MHA[case]
    if mask == "causal":
        kernels = [SPLIT]  # top-left causal: the rows see only the first seq_q keys, one split
    check_decode(gapi, shape, mask, dtype, kernels)


@pytest.fixture(scope="module")
def papi():
    """A server offering flash's grouped K/V heads and windows."""
    with server_offering(lambda api: {"kv_heads", "window"} <= variant_features(api, "flash")) as api:
        yield api


@pytest.mark.parametrize("mask,window", [("none", None), ("causal_bottom_right", None), ("causal_bottom_right", 32)])
@pytest.mark.parametrize("group,seq_q", [(4, 1), (4, 4), (8, 16), (2, 2), (1, 1), (8, 1), (3, 3), (4, 3)])
def test_splitkv_gqa_decode(papi, group, seq_q, mask, window):
    """The query heads of a K/V group share each K/V load (PackGQA): group × seq_q rows per
    CTA, 8 × 16 = 128 in 8 row tiles; 8, 9 and 12 rows sit at and past the edges of tiles of 8
    and 16 rows."""
    shape = dict(batch=2, heads=8 * group, kv_heads=8, seq_q=seq_q, seq_kv=4097, head_dim=128)
    if window:
        shape["window"] = window
    rec = check_decode(papi, shape, mask, "bf16", [SPLIT, COMBINE])
    fact("flash splitkv GQA group %d seq_q %d %s median_us" % (group, seq_q, mask), rec["timing"]["median_us"])


@pytest.mark.parametrize("mask", ["none", "causal_bottom_right"])
@pytest.mark.parametrize("group,seq_q", [(4, 1), (2, 4), (4, 4), (8, 2), (1, 1)])
def test_splitkv_decode_at_head_dim_256(papi, group, seq_q, mask):
    """Gemma-sized heads: one V buffer a warp, and tiles of 8 rows whatever the rows (16 rows
    run as two tiles)."""
    shape = dict(batch=2, heads=8 * group, kv_heads=8, seq_q=seq_q, seq_kv=4097, head_dim=256)
    rec = check_decode(papi, shape, mask, "bf16", [SPLIT, COMBINE])
    fact("flash splitkv D256 group %d seq_q %d %s median_us" % (group, seq_q, mask), rec["timing"]["median_us"])


def test_split_decode_replays_in_a_graph(gapi, variants):
    """On Hopper the combine kernel is a dependent launch: scheduled while the split kernel's
    CTAs finish, it waits for that grid before reading. Captured in a CUDA graph and replayed,
    the run still verifies, and its output has the bits of a plain run's. 35 splits: the
    combine's lanes hold splits 0-31 and 32-34."""
    need_variant(variants, "flash")
    if not runs_splitkv(gapi):
        pytest.fail("cuda:0's worker does not run flash splitkv (it needs compute capability 8.0)")
    shape = dict(batch=1, heads=2, seq_q=2, seq_kv=9000, head_dim=128)
    plain = check_decode(gapi, shape, "none", "bf16", [SPLIT, COMBINE])
    seed = plain["params"]["seed"]
    graph = post_run_ok(gapi, dict(shape, backend="flash", impl="splitkv", mask="none", dtype="bf16", seed=seed,
                                   warmup=1, iters=10, graph=True, verify=True, device="cuda:0"))
    check_verified(graph, shape, "bf16")
    assert graph["timing"]["graph"] is True, graph["timing"]
    assert graph["output"]["fingerprint"] == plain["output"]["fingerprint"]


def test_dense_decodes_default_to_splitkv(papi):
    """A dense decode that leaves impl to the default runs split-KV: grouped (the prefill kernels
    read each K/V head once per query head of its group) and multi-head (they do not split the
    keys); a head_dim the kernel does not take (96) and 17 query rows keep the default family."""
    shape = dict(batch=2, heads=32, kv_heads=8, seq_q=1, seq_kv=4097, head_dim=128)
    body = dict(shape, backend="flash", dtype="bf16", mask="causal_bottom_right", seed=fresh_seed(), warmup=1, iters=3,
                verify=True, profile=True, device="cuda:0")
    rec = post_run_ok(papi, body)
    check_verified(rec, shape, "bf16")
    assert rec["impl_used"] == "splitkv" and "impl" not in rec["params"], (rec.get("impl_used"), rec["params"])
    names = kernel_names(rec)
    assert len(names) == 2 and SPLIT in names[0] and COMBINE in names[1], names
    mha = post_run_ok(papi, dict(body, kv_heads=32, seed=fresh_seed()))
    check_verified(mha, dict(shape, kv_heads=32), "bf16")
    assert mha["impl_used"] == "splitkv", mha.get("impl_used")
    for other in (dict(head_dim=96), dict(seq_q=17)):
        rec = post_run_ok(papi, dict(body, seed=fresh_seed(), **other))
        assert rec["impl_used"] != "splitkv", (other, rec.get("impl_used"))


def test_splitkv_refuses_long_queries(gapi, variants):
    need_variant(variants, "flash")
    r = gapi.run(params=dict(backend="flash", impl="splitkv", batch=1, heads=4, seq_q=17, seq_kv=4096,
                             head_dim=128, dtype="bf16", device="cuda:0"))
    assert r.status_code == 422, r.text
    err = error_of(r)
    assert err["code"] == "unsupported" and err["field"] == "seq_q" and "up to 16" in err["message"], err


def test_splitkv_mha_decode_bandwidth(gapi, variants):
    """The MHA decode first measured on the H200 (B64 H32 Skv4096 D128: flash 1000 us, cudnn 966
    us): a fact for the summary, not a pass mark (fused_check times it against cudnn)."""
    need_variant(variants, "flash")
    shape = dict(batch=64, heads=32, seq_q=1, seq_kv=4096, head_dim=128)
    # bottom-right: the decode token sees the whole cache (the default, top-left causal, one key)
    rec = gapi.run_ok(backend="flash", impl="splitkv", dtype="bf16", mask="causal_bottom_right", seed=fresh_seed(),
                      warmup=3, iters=20, **shape)
    us = rec["timing"]["median_us"]
    kv_bytes = 2 * 64 * 32 * 4096 * 128 * 2
    fact("flash splitkv MHA decode B64 H32 Skv4096 median_us", us)
    fact("flash splitkv MHA decode B64 H32 Skv4096 K/V TB/s", kv_bytes / (us * 1e-6) / 1e12)


# ---------------------------------------------------------------- serving batches

@pytest.fixture(scope="module")
def sapi():
    """A server offering flash's serving features (paged caches, ragged batches)."""
    with server_offering(lambda api: {"page_size", "seqlens", "kv_heads"} <= variant_features(api, "flash")) as api:
        yield api


# Decode over paged caches and ragged batches: the split-KV kernel's SERVING instantiation (the
# default impl for them). Page sizes 1, 4 (powers of 2 below a block: a shift), 7 (neither: a
# multiply-high), 16 and one that does not divide the keys; lengths 0, 1 and past one split;
# speculative decode (several queries a sequence); windows; GQA groups.
SERVING = [
    dict(batch=3, heads=8, kv_heads=2, seq_q=1, seq_kv=700, page_size=16),
    dict(batch=2, heads=4, kv_heads=4, seq_q=1, seq_kv=4097, page_size=1, num_pages=9000),
    dict(batch=2, heads=16, kv_heads=2, seq_q=4, seq_kv=1000, page_size=48, window=100),
    dict(heads=8, kv_heads=2, seq_q=1, seqlens_kv=[1, 0, 300, 5000]),
    dict(heads=8, kv_heads=1, seqlens_q=[1, 4, 0, 16], seqlens_kv=[33, 7, 0, 2000], page_size=16),
    dict(heads=4, kv_heads=2, seqlens_q=[2, 3], seqlens_kv=[600, 9000], window=64),
    dict(heads=8, kv_heads=2, seqlens_q=[1, 3, 1], seqlens_kv=[13, 2049, 1], page_size=4),
    dict(heads=8, kv_heads=2, seqlens_q=[1, 2], seqlens_kv=[5, 3001], page_size=7),
]


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("mask", ["none", "causal_bottom_right"])
@pytest.mark.parametrize("case", range(len(SERVING)), ids=lambda i: "serving%d" % i)
@pytest.mark.parametrize("head_dim", [128, 64, 256])
def test_splitkv_serving_decode(sapi, case, mask, dtype, head_dim):
    shape = dict(SERVING[case], head_dim=head_dim)
    params = dict(shape, backend="flash", mask=mask, dtype=dtype, seed=fresh_seed(), warmup=1, iters=3, verify=True,
                  profile=True, device="cuda:0")
    rec = post_run_ok(sapi, params)
    assert rec["verify"] is not None and rec["verify"]["pass"], (shape, rec["verify"])
    assert rec["output"]["nan"] == 0 and rec["impl_used"] == "splitkv", rec.get("impl_used")
    assert SPLIT in kernel_names(rec)[0], kernel_names(rec)


@pytest.mark.parametrize("head_dim", [128, 64, 256])
@pytest.mark.parametrize("page_size", [1, 2, 7, 8, 12, 16, 48])
def test_splitkv_paged_gives_the_contiguous_fingerprint(sapi, page_size, head_dim):
    """A paged cache read through its block table gives the contiguous twin's output bit for bit
    (the same keys in the same order, the same splits: mask none covers every key in both),
    whichever way a key's page is found: a shift (powers of 2), a multiply-high (7, 12; at D256
    just before each load), once a block (16, 48)."""
    body = dict(backend="flash", impl="splitkv", dtype="bf16", batch=3, heads=8, kv_heads=2, seq_q=2, seq_kv=3000,
                head_dim=head_dim, mask="none", seed=fresh_seed(), device="cuda:0", warmup=0, iters=1)
    flat = post_run_ok(sapi, body)
    paged = post_run_ok(sapi, dict(body, page_size=page_size))
    assert paged["output"]["fingerprint"] == flat["output"]["fingerprint"], (page_size, head_dim)


def test_ragged_prefill_leaves_splitkv(sapi):
    """A batch with a sequence of more than 16 queries is a prefill: v6's SERVING kernel runs it
    by default on compute capability 9.0, v3's elsewhere; impl splitkv refuses it."""
    body = dict(backend="flash", dtype="bf16", heads=8, kv_heads=2, head_dim=128, seqlens_q=[5, 17],
                seqlens_kv=[30, 40], device="cuda:0", warmup=0, iters=1)
    (dev,) = [d for d in sapi.get("/v1/device").json()["devices"] if d.get("id") == "cuda:0"]
    want = "tma" if dev.get("compute_capability") == "9.0" else "legacy"
    assert post_run_ok(sapi, dict(body, verify=True))["impl_used"] == want
    r = sapi.run(body=dict(body, impl="splitkv"))
    assert r.status_code == 422 and "seq_q up to 16" in error_of(r)["message"], r.text


def planned_splits(base, slots, max_splits):
    """FA3's num_splits_heuristic with 0.9, as docs/fused.md gives the split-KV's plan: the
    smallest count whose CTAs fill the slots in near-whole waves (the last ≥ 90% full), else the
    fullest."""
    best, best_eff = 1, 0.0
    for s in range(1, max_splits + 1):
        w = base * s / slots
        if w / math.ceil(w) >= 0.9:
            return s
        if w / math.ceil(w) > best_eff:
            best, best_eff = s, w / math.ceil(w)
    return best


# GQA decodes of one tile a (sequence, K/V head): dense, and paged (the serving kernel, whose
# registers differ from the dense one's), D64 and D128, many sequences and few.
WAVES = [
    dict(batch=64, heads=32, kv_heads=8, seq_kv=2048, head_dim=64),
    dict(batch=64, heads=32, kv_heads=8, seq_kv=2048, head_dim=64, page_size=16),
    dict(batch=64, heads=32, kv_heads=8, seq_kv=2048, head_dim=64, page_size=1),
    dict(batch=64, heads=32, kv_heads=8, seq_kv=2048, head_dim=128, page_size=16),
    dict(batch=8, heads=64, kv_heads=8, seq_kv=4096, head_dim=64, page_size=1),
]


@pytest.mark.parametrize("case", range(len(WAVES)), ids=lambda i: "waves%d" % i)
def test_split_count_is_planned_for_the_kernel_that_runs(sapi, case):
    """The split count is planned from the CTAs an SM holds of the kernel that runs, as its
    profiled record measures them (registers and shared memory: the row's occupancy): the split
    kernel's grid is the plan's. A D64 paged decode once planned with the dense kernel's 4 CTAs an
    SM while its own held 3, and ran 1.29 waves where it meant one."""
    shape = WAVES[case]
    rec = post_run_ok(sapi, dict(shape, backend="flash", dtype="bf16", seq_q=1, mask="none", seed=fresh_seed(),
                                 warmup=1, iters=2, profile=True, device="cuda:0"))
    rows = [r for r in rec["kernels"]["table"] if r["kind"] == "kernel"]
    (split,) = [r for r in rows if SPLIT in r["name"]]
    (dev,) = [d for d in sapi.get("/v1/device").json()["devices"] if d.get("id") == "cuda:0"]
    threads_per_sm = 1536 if dev["compute_capability"] in ("8.6", "8.7", "8.9") else 2048
    threads = split["block"][0] * split["block"][1] * split["block"][2]
    ctas_per_sm = round(split["occupancy"] * threads_per_sm / threads)
    base = shape["batch"] * shape["kv_heads"]  # one tile of at most 8 query rows each
    blocks = -(-shape["seq_kv"] // 16)
    max_splits = min(64, -(-shape["seq_kv"] // 256), -(-8192 // base), blocks)
    chosen = planned_splits(base, dev["sms"] * ctas_per_sm, max_splits)
    split_keys = -(-blocks // chosen) * 16
    splits = -(-shape["seq_kv"] // split_keys)  # whole blocks a split: the count that covers the keys
    assert split["grid"] == [base * splits, 1, 1], (shape, split, dev["sms"], ctas_per_sm)
    assert any(COMBINE in r["name"] for r in rows) == (splits > 1), [r["name"] for r in rows]
