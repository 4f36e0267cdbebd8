"""The `flashinfer` variant over serving batches (docs/flashinfer.md, "Serving batches"): paged
decode through the real block table (by default the tensor-core decode, FA2's
BatchPrefillWithPagedKVCacheDispatched over the NHD cache, as current vLLM runs every decode;
impl=cuda_cores BatchDecodeWithPagedKVCacheDispatched over the same pages; paged_kv_t built on
the host in prepare), ragged decode, ragged prefill
(BatchPrefillWithRaggedKVCacheDispatched, one launch per forward), and on Hopper the paged
prefill (more than one query row a sequence over the paged cache: Hopper's
BatchPrefillWithPagedKVCacheDispatched, as vLLM runs chunked prefills and speculative
decodes). Its `paged` and `ragged` bits are in `features` since this passed on the H200; it
runs on the pytest run's server where that one offers them, else on one of its own; it skips
where flashinfer is unavailable (make flashinfer).

- verify=true against the fp64 reference, bf16 and fp16, head dims 64 and 128: page_size 1, 16
  and 64, seq_kv not a multiple of the page, more pages than used, GQA groups 4 and 8, ragged
  lengths with sequences of 1 query or key and empty ones, every mask it takes;
- a group-4 and a group-8 decode over a dense, a paged and a ragged cache take the tensor-core
  decode by default (the batch prefill kernel in CUPTI's table) and the CUDA-core decode under
  impl=cuda_cores, and impl_used says which;
- a paged decode at pages of 16 and its contiguous twin give equal fingerprints (both are
  FlashInfer's decode over 16-key pages, split alike: only the addresses differ); other page
  sizes agree within verify's tolerance;
- an uploaded block table and lengths give the generated run's fingerprint;
- a paged prefill at pages of 16 gives its contiguous twin's fingerprint (the same kernel over
  16-key pages, HND or NHD); other page sizes within verify's tolerance;
- kernels per forward as CUPTI measures them: the decode kernel, CUDA-core or tensor-core (+
  the merge when the plan splits), one batch prefill kernel for a whole ragged batch, the paged
  prefill's kernel (between two transposes where q is [B,H,Sq,D]);
- what it refuses, by name: a paged prefill before Hopper, a sequence with queries and no keys, a causal
  sequence with more queries than keys, impl=cuda_cores at a group its kernel lacks, an impl on
  a ragged prefill; GET /v1/device's `flashinfer` is the module's version.
"""
import numpy as np
import pytest

from attnd_gpu_helpers import case_id, error_of, fact, fresh_seed, offers_serving_features, post_run_ok, server_offering, upload
from attnd_api_helpers import load_gen  # noqa: E402

CUDA_CORE_GROUPS = (1, 2, 3, 4, 6, 8, 16)  # kernels/flashinfer/flashinfer_layout.h attnd_fi_cuda_cores_group
# (case): decode cases have one query row a sequence; the rest are ragged prefills
CASES = [
    dict(batch=3, heads=8, kv_heads=2, seq_q=1, seq_kv=33, page_size=1),                  # GQA 4, page 1
    dict(batch=3, heads=16, kv_heads=2, seq_q=1, seq_kv=1000, page_size=16, num_pages=200),  # GQA 8, spare pages
    dict(batch=2, heads=8, kv_heads=2, seq_q=1, seq_kv=4097, page_size=64),               # long: split-KV
    dict(batch=2, heads=10, kv_heads=2, seq_q=1, seq_kv=300, page_size=16),               # GQA 5: tensor cores
    dict(batch=2, heads=16, kv_heads=2, seq_q=1, seq_kv=4097, page_size=1),               # GQA 8, page 1, split
    dict(heads=8, kv_heads=2, seq_q=1, seqlens_kv=[1, 16, 17, 40], page_size=16),         # ragged paged decode
    dict(heads=16, kv_heads=2, seq_q=1, seqlens_kv=[1, 16, 17, 300], page_size=64),
    dict(heads=8, kv_heads=2, seq_q=1, seqlens_kv=[1, 129, 17]),                          # ragged contiguous decode
    dict(heads=16, kv_heads=2, seq_q=1, seqlens_kv=[1, 129, 17, 2000]),                   # the same, GQA 8
    dict(heads=8, kv_heads=2, seqlens_q=[5, 0, 1, 7], seqlens_kv=[33, 0, 17, 9]),         # ragged prefill
    dict(heads=16, kv_heads=2, seqlens_q=[1, 300, 64, 1], seqlens_kv=[1, 300, 700, 2]),
    dict(heads=4, kv_heads=4, seqlens_q="9,1,130", seq_kv=130),
    dict(batch=3, heads=8, kv_heads=2, seq_q=4, seq_kv=1000, page_size=16, num_pages=250),  # paged spec decode
    dict(heads=8, kv_heads=2, seqlens_q=[4, 1, 0, 7], seqlens_kv=[33, 17, 0, 300], page_size=16),  # paged ragged
    dict(heads=16, kv_heads=2, seqlens_q=[3, 2], seqlens_kv=[5, 4097], page_size=1),     # page 1, long
    dict(batch=2, heads=4, kv_heads=4, seq_q=130, seq_kv=1100, page_size=64),             # chunked prefill
]
MASKS = ["none", "causal", "causal_bottom_right"]


@pytest.fixture(scope="module")
def fapi():
    """A server offering flashinfer's serving features; a skip where flashinfer is unavailable."""
    with server_offering(lambda api: offers_serving_features(api, "flashinfer")) as api:
        row = {v["name"]: v for v in api.get("/v1/variants").json()["variants"]}["flashinfer"]
        if not row["available"]:
            pytest.skip("flashinfer not available: %s" % row["why"])
        yield api


def is_decode(case):
    return case.get("seq_q") == 1


@pytest.fixture(scope="module")
def hopper(fapi):
    (dev,) = [d for d in fapi.get("/v1/device").json()["devices"] if d.get("id") == "cuda:0"]
    return dev.get("compute_capability") == "9.0"


def prefill_entry(case):
    """A prefill's entry point and kernels per forward: the paged prefill over the block table
    (+ the two transposes of a [B,H,Sq,D] q and out), or the ragged prefill."""
    if "page_size" in case:
        return "BatchPrefillWithPagedKVCacheDispatched", 1 if "seqlens_q" in case else 3
    return "BatchPrefillWithRaggedKVCacheDispatched", 1


def decode_entry(impl):
    """The entry point and kernel of a decode: FlashInfer's CUDA-core decode for impl
    cuda_cores, else its tensor-core decode (its FA2 batch prefill over the pages)."""
    if impl == "cuda_cores":
        return "BatchDecodeWithPagedKVCacheDispatched", "BatchDecodeWithPagedKVCacheKernel"
    return "BatchPrefillWithPagedKVCacheDispatched", "BatchPrefillWithPagedKVCacheKernel"


def decode_impl(case, i):
    """The impl the i-th run of a decode case names: the default and cuda_cores in turn where
    the CUDA-core decode has the group; None (the default) otherwise."""
    group = case["heads"] // case.get("kv_heads", case["heads"])
    return "cuda_cores" if is_decode(case) and group in CUDA_CORE_GROUPS and i % 2 else None


def allowed(case, mask):
    """Whether the mask applies: causal needs each sequence's queries <= its keys."""
    if mask == "none" or "seqlens_q" not in case:
        return True
    lq = [int(x) for x in str(case["seqlens_q"]).strip("[]").split(",")] if isinstance(case["seqlens_q"], str) \
        else case["seqlens_q"]
    lkv = case.get("seqlens_kv") or [case["seq_kv"]] * len(lq)
    return all(q <= kv for q, kv in zip(lq, lkv))


@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_verify_against_the_reference(fapi, hopper, case):
    if not is_decode(case) and "page_size" in case and not hopper:
        pytest.skip("a paged prefill runs on Hopper only (test_paged_prefill_before_hopper_is_refused)")
    failures = []
    for i, (dtype, mask) in enumerate((d, m) for d in ("bf16", "fp16") for m in MASKS):
        if not allowed(case, mask):
            continue
        d = (64, 128)[(i + CASES.index(case)) % 2]
        impl = decode_impl(case, i)
        body = dict(case, backend="flashinfer", device="cuda:0", dtype=dtype, mask=mask, head_dim=d,
                    seed=fresh_seed(), warmup=1, iters=2, verify=True, profile=True)
        if impl:
            body["impl"] = impl
        r = fapi.run(body=body, timeout=300)
        what = "%s %s %s D%d impl %s" % (case_id(case), dtype, mask, d, impl or "default")
        if r.status_code != 200:
            failures.append("%s: HTTP %d %s" % (what, r.status_code, r.text[:400]))
            continue
        rec = r.json()
        ver, engine, k = rec.get("verify") or {}, rec.get("engine") or "", rec["kernels"]
        if not ver.get("pass") or rec["output"]["nan"]:
            failures.append("%s: verify %r nan %r" % (what, ver, rec["output"]["nan"]))
        want, per_forward = (decode_entry(impl)[0], None) if is_decode(case) else prefill_entry(case)
        if want not in engine:
            failures.append("%s: engine %r does not name %s" % (what, engine, want))
        used = (impl or "tensor_cores") if is_decode(case) else None
        if rec.get("impl_used") != used:
            failures.append("%s: impl_used %r, want %r" % (what, rec.get("impl_used"), used))
        names = [t["name"] for t in k["table"] if t["kind"] == "kernel"]
        if is_decode(case):
            ok = k["per_forward"] == (2 if "split-KV" in engine else 1) and \
                any(decode_entry(impl)[1] in n for n in names)
        else:
            ok = k["per_forward"] == per_forward  # one launch for the whole batch (+ the transposes)
        if not ok:
            failures.append("%s: %d kernels per forward %r (%s)" % (what, k["per_forward"], names, engine))
        fact("flashinfer serving %s kernels" % what, "%d: %s | %s rel_l2 %.2e" % (
            k["per_forward"], ", ".join(n[:50] for n in names), engine[:100], ver.get("rel_l2_err", -1)))
    assert not failures, "\n".join(failures)


GQA4_TWIN = dict(batch=3, heads=8, kv_heads=2, seq_q=1, seq_kv=1000, mask="none")
GQA8_TWIN = dict(batch=2, heads=16, kv_heads=2, seq_q=1, seq_kv=4097, mask="causal_bottom_right")


@pytest.mark.parametrize("twin", [GQA4_TWIN, dict(GQA4_TWIN, impl="cuda_cores"), GQA8_TWIN],
                         ids=["gqa4", "gqa4_cuda_cores", "gqa8_split"])
def test_paged_decode_gives_the_contiguous_fingerprint(fapi, twin):
    """Pages of 16 keys: the contiguous run is the same decode over 16-key pages (HND view), the
    same plan and the same key order: equal fingerprints (the tensor-core decode by default,
    the CUDA-core one under impl=cuda_cores). Pages of 1 and 64 change the plan's
    chunks (a reduction order): verify's tolerance, and the fingerprints are reported."""
    body = dict(twin, backend="flashinfer", device="cuda:0", dtype="bf16", head_dim=128, seed=fresh_seed(),
                warmup=0, iters=1)
    flat = post_run_ok(fapi, body)
    paged = post_run_ok(fapi, dict(body, page_size=16))
    assert paged["output"]["fingerprint"] == flat["output"]["fingerprint"], (flat.get("engine"), paged.get("engine"))
    for ps in (1, 64):
        other = post_run_ok(fapi, dict(body, page_size=ps, verify=True))
        assert other["verify"]["pass"], (ps, other["verify"])
        fact("flashinfer paged decode page %d vs contiguous" % ps, "%s %s" % (
            other["output"]["fingerprint"] == flat["output"]["fingerprint"], other.get("engine")))


def test_paged_prefill_gives_the_contiguous_fingerprint(fapi, hopper):
    """A speculative decode (4 query rows a sequence) over pages of 16 and over the contiguous
    cache: both are Hopper's paged prefill over 16-key pages (NHD through the block table, HND
    over the cache), the same plan and key order: equal fingerprints. Pages of 1 and 64 give
    the same plan too (the kernel gathers key by key); verify's tolerance is asserted, the
    fingerprints reported."""
    if not hopper:
        pytest.skip("the paged prefill runs on Hopper only")
    body = dict(batch=3, heads=16, kv_heads=4, seq_q=4, seq_kv=3001, mask="causal_bottom_right", backend="flashinfer",
                device="cuda:0", dtype="bf16", head_dim=128, seed=fresh_seed(), warmup=0, iters=1)
    flat = post_run_ok(fapi, body)
    paged = post_run_ok(fapi, dict(body, page_size=16))
    for rec in (flat, paged):
        assert "BatchPrefillWithPagedKVCacheDispatched" in rec.get("engine", ""), rec.get("engine")
    assert paged["output"]["fingerprint"] == flat["output"]["fingerprint"], (flat.get("engine"), paged.get("engine"))
    for ps in (1, 64):
        other = post_run_ok(fapi, dict(body, page_size=ps, verify=True))
        assert other["verify"]["pass"], (ps, other["verify"])
        fact("flashinfer paged prefill page %d vs contiguous" % ps, "%s %s" % (
            other["output"]["fingerprint"] == flat["output"]["fingerprint"], other.get("engine")))


def test_paged_prefill_before_hopper_is_refused(fapi, hopper):
    """FA2's paged prefill (8.x) is not wired: a 422 that says where it runs."""
    if hopper:
        pytest.skip("Hopper runs the paged prefill (test_verify_against_the_reference)")
    r = fapi.run(body=dict(backend="flashinfer", device="cuda:0", dtype="bf16", heads=4, kv_heads=2, head_dim=64,
                           batch=2, seq_q=4, seq_kv=64, page_size=16, iters=1))
    err = error_of(r)
    assert r.status_code == 422 and "9.0 only" in err["message"], (r.status_code, err)


def test_uploaded_table_gives_the_generated_fingerprint(fapi):
    """A block table and lengths uploaded as int32 tensors (read through the worker's host copy)
    give the run over the seeded table's fingerprint when they are that table."""
    gen = load_gen()
    seed = fresh_seed() % (2 ** 62)
    spec = dict(seq_q=1, seqlens_kv=[33, 1, 17, 16], page_size=16, num_pages=12)
    lay = gen.serving_layout(seed, **spec)
    table = upload(fapi, lay["block_table"].astype(np.int32), "int32")
    lkv = upload(fapi, np.asarray(lay["seqlens_kv"], np.int32), "int32")
    try:
        base = dict(backend="flashinfer", device="cuda:0", dtype="bf16", heads=8, kv_heads=2, head_dim=64,
                    mask="none", seed=seed, warmup=0, iters=1)
        want = post_run_ok(fapi, dict(base, **spec))
        got = post_run_ok(fapi, dict(base, **dict(spec, seqlens_kv=lkv, block_table=table)))
        assert got["output"]["fingerprint"] == want["output"]["fingerprint"]
    finally:
        for tid in (table, lkv):
            fapi.request("DELETE", "/v1/tensors/%s" % tid)


LAYOUTS = {
    "dense": dict(batch=3, seq_kv=3000),
    "paged": dict(batch=3, seq_kv=3000, page_size=16, num_pages=700),
    "ragged": dict(seqlens_kv=[1, 17, 3000]),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_decode_impls_choose_the_kernel(fapi, layout):
    """Current vLLM's choice (use_tensor_cores=True at every group) is the default: a group-4 and
    a group-8 decode run FlashInfer's tensor-core decode, the FA2 batch prefill over the paged
    view of the same cache; impl=cuda_cores runs its CUDA-core decode kernel instead (SGLang's
    choice up to group 4). Each matches the fp64 reference, the kernel table CUPTI measures names
    its kernel and never the other's (and the merge when the plan splits), and impl_used says
    which ran."""
    failures = []
    triples = (("bf16", 128, "none"), ("fp16", 64, "causal"), ("bf16", 256, "causal_bottom_right"))
    combos = [(h, impl) for h in (64, 32) for impl in (None, "cuda_cores")]
    for n, (heads, impl) in enumerate(combos):
        for dtype, d, mask in (triples[n % 3], triples[(n + 1) % 3]):
            kv_heads = 8
            case = dict(LAYOUTS[layout], heads=heads, kv_heads=kv_heads, seq_q=1)
            entry, kernel = decode_entry(impl)
            other = decode_entry("tensor_cores" if impl == "cuda_cores" else "cuda_cores")[1]
            body = dict(case, backend="flashinfer", device="cuda:0", dtype=dtype, mask=mask, head_dim=d,
                        seed=fresh_seed(), warmup=1, iters=2, verify=True, profile=True)
            if impl:
                body["impl"] = impl
            r = fapi.run(body=body, timeout=300)
            what = "%s H%d/%d %s %s D%d impl %s" % (layout, heads, kv_heads, dtype, mask, d, impl or "default")
            if r.status_code != 200:
                failures.append("%s: HTTP %d %s" % (what, r.status_code, r.text[:400]))
                continue
            rec = r.json()
            ver, engine, k = rec.get("verify") or {}, rec.get("engine") or "", rec["kernels"]
            names = [t["name"] for t in k["table"] if t["kind"] == "kernel"]
            if not ver.get("pass") or rec["output"]["nan"]:
                failures.append("%s: verify %r nan %r" % (what, ver, rec["output"]["nan"]))
            if entry not in engine:
                failures.append("%s: engine %r does not name %s" % (what, engine, entry))
            if not any(kernel in n for n in names) or any(other in n for n in names):
                failures.append("%s: want %s and no %s in the kernel table %r" % (what, kernel, other, names))
            if rec.get("impl_used") != (impl or "tensor_cores"):
                failures.append("%s: impl_used %r" % (what, rec.get("impl_used")))
            if k["per_forward"] != (2 if "split-KV" in engine else 1) or \
                    ("split-KV" in engine and not any("MergeStates" in n for n in names)):
                failures.append("%s: %d kernels per forward %r (%s)" % (what, k["per_forward"], names, engine))
            fact("flashinfer decode %s kernels" % what, "%d: %s | %s rel_l2 %.2e median %.1f us" % (
                k["per_forward"], ", ".join(n[:50] for n in names), engine[:160], ver.get("rel_l2_err", -1),
                rec["timing"]["median_us"]))
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("body,needle", [
    (dict(seqlens_q=[3, 2], seqlens_kv=[8, 0], mask="none"), "sequence 1 has queries and no keys"),
    (dict(seqlens_q=[3, 5], seqlens_kv=[8, 4], mask="causal_bottom_right"), "sequence 1: 5 > 4"),
    (dict(heads=10, seq_q=1, seqlens_kv=[40, 9], page_size=16, impl="cuda_cores"), "1, 2, 3, 4, 6, 8 and 16"),
    (dict(seqlens_q=[3, 2], seqlens_kv=[8, 9], impl="tensor_cores"), "chooses the decode kernel"),
], ids=["queries_without_keys", "causal_more_queries", "cuda_cores_group5", "impl_on_a_prefill"])
def test_refusals_name_the_reason(fapi, body, needle):
    r = fapi.run(body=dict(dict(backend="flashinfer", device="cuda:0", dtype="bf16", heads=4, kv_heads=2,
                                head_dim=64, iters=1), **body))
    err = error_of(r)
    assert r.status_code == 422 and needle in err["message"], (r.status_code, err)


def test_device_names_the_flashinfer_version(fapi):
    devs = {d["id"]: d for d in fapi.get("/v1/device").json()["devices"]}
    row = {v["name"]: v for v in fapi.get("/v1/variants").json()["variants"]}["flashinfer"]
    assert devs["cuda:0"]["flashinfer"] == row["library"]["version"], (devs["cuda:0"], row["library"])
    fact("flashinfer version on cuda:0", devs["cuda:0"]["flashinfer"])
