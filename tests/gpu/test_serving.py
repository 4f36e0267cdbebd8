"""Serving batches on the GPU: naive, naive_inplace and math over paged K/V caches and ragged
batches by PyTorch's padded route (kernels/serving_pad.cuh, docs/serving.md), offered once this
passed on an H100. The module runs on the pytest run's server (ATTND_URL) where that one offers
them, else starts its own (ATTND_BIN, all devices: tests/gpu/run.sh); it skips where the server
has no cuda:0 (fails with ATTND_REQUIRE_GPU=1).

- verify=true against the fp64 reference, bf16 and fp16: page_size 1 and 16, seq_kv not a
  multiple of the page, more pages than used, sequences of length 0 and 1 (naive, like PyTorch
  eager, gives NaN for a query row that sees no key: its cases give every such row a key);
- a paged run and its contiguous twin give equal fingerprints (the gathered K/V are the twin's
  bytes, the kernels the same), ragged or not;
- the uploaded case: q, a paged k/v, the block table and the lengths made in numpy
  (clients/python attnd_ref, the cpu device's bytes) and uploaded to cuda:0 give the generated
  run's fingerprint: the GPU's generated cache is the cpu path's where the run reads it;
- kernels per forward equal torch.profiler's for the PyTorch code mirrored (torch_padded_route
  below, docs/serving.md).
"""
import math
import os
import sys

import numpy as np
import pytest

from attnd_gpu_helpers import (case_id, error_of, fact, fresh_seed, offers_serving_features, pending_server,
                                post_run_ok, server_offering, upload)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "api"))
from attnd_api_helpers import load_gen  # noqa: E402

VARIANTS = ["naive", "naive_inplace", "math"]
GQA = dict(heads=4, kv_heads=2, head_dim=64, warmup=0, iters=1, device="cuda:0")
# (case, variants it applies to): every query row of a naive case sees at least one key
CASES = [
    (dict(batch=3, seq_q=5, seq_kv=33, page_size=1, mask="causal_bottom_right"), VARIANTS),
    (dict(batch=3, seq_q=5, seq_kv=33, page_size=16, mask="causal", window=8), VARIANTS),
    (dict(batch=2, seq_q=6, seq_kv=19, page_size=16, num_pages=9, mask="none", head_dim_v=32), VARIANTS),
    (dict(seqlens_q=[5, 0, 1, 7], seqlens_kv=[33, 0, 17, 1], mask="causal"), VARIANTS),
    (dict(seqlens_q=[5, 0, 1, 7], seqlens_kv=[33, 0, 17, 1], mask="none", page_size=16), VARIANTS),
    (dict(seq_q=1, seqlens_kv=[1, 16, 17, 40], mask="causal_bottom_right", page_size=16), VARIANTS),
    (dict(seqlens_q="4,0,9", seq_kv=12, mask="causal_bottom_right", page_size=1), VARIANTS),
    # a query row over an empty cache: zeros (safe softmax) in math, NaN in naive as in PyTorch
    (dict(seqlens_q=[1, 1, 3], seqlens_kv=[0, 1, 2], mask="causal_bottom_right", page_size=1), ["math"]),
]


@pytest.fixture(scope="module")
def sapi():
    with server_offering(lambda api: offers_serving_features(api, *VARIANTS)) as api:
        yield api


@pytest.mark.parametrize("dtype", ["bf16", "fp16"])
@pytest.mark.parametrize("case,names", CASES, ids=[case_id(c) for c, _ in CASES])
def test_verify_against_the_reference(sapi, case, names, dtype):
    for name in names:
        rec = post_run_ok(sapi, dict(GQA, backend=name, dtype=dtype, seed=fresh_seed(), verify=True, **case))
        assert rec["verify"] is not None and rec["verify"]["pass"], (name, case, rec["verify"])
        assert rec["output"]["nan"] == 0, (name, case, rec["output"])


def test_gpu_fp32_reference_takes_the_layouts(sapi):
    """Above verify_cpu_max_macs (0 here) verify runs math's fp32 path on the GPU, which takes the
    serving layouts too (its padded output unpadded into the packed reference)."""
    srv, api = pending_server(["--verify-cpu-max-macs", "0"])
    try:
        for case, names in CASES[3:6]:
            for name in names:
                rec = post_run_ok(api, dict(GQA, backend=name, dtype="bf16", seed=fresh_seed(), verify=True, **case))
                assert rec["verify"]["reference"] == "gpu_math_fp32" and rec["verify"]["pass"], (name, case, rec["verify"])
    finally:
        srv.stop()
        srv.cleanup()


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("twin", [dict(batch=3, seq_q=5, seq_kv=33, mask="causal"),
                                  dict(seqlens_q=[5, 0, 1, 7], seqlens_kv=[33, 0, 17, 1], mask="none")],
                         ids=["dense", "ragged"])
def test_paged_run_gives_the_contiguous_fingerprint(sapi, name, twin):
    """The gather gives the contiguous twin's K/V bit for bit and the same kernels run after it:
    equal fingerprints for page_size 1 and 16 (ragged: the padding a gathered slot holds is
    masked, its probability exactly 0)."""
    seed = fresh_seed()
    body = dict(GQA, backend=name, dtype="bf16", seed=seed, **twin)
    flat = post_run_ok(sapi, body)
    for ps in (1, 16):
        paged = post_run_ok(sapi, dict(body, page_size=ps))
        assert paged["output"]["fingerprint"] == flat["output"]["fingerprint"], (name, twin, ps)


def test_uploaded_case_gives_the_generated_fingerprint(sapi):
    """Lengths and a block table as resident int32 tensors on cuda:0 (copied to the host once
    per run), q and the paged k/v as attnd_ref makes them: the generated run's fingerprint."""
    gen = load_gen()
    seed = fresh_seed() % (2 ** 62)
    spec = dict(seqlens_q=[5, 0, 1, 7], seqlens_kv=[33, 0, 17, 1], page_size=16, num_pages=12)
    lay = gen.serving_layout(seed, **spec)
    q, k, v = gen.serving_inputs(seed, lay, 4, 64, "bf16", kv_heads=2)
    ids = [upload(sapi, a, "bf16") for a in (q, k, v)]
    table = upload(sapi, lay["block_table"].astype(np.int32), "int32")
    lq = upload(sapi, np.asarray(lay["seqlens_q"], np.int32), "int32")
    lkv = upload(sapi, np.asarray(lay["seqlens_kv"], np.int32), "int32")
    try:
        for name in VARIANTS:
            base = dict(GQA, backend=name, dtype="bf16", mask="causal", seed=seed)
            want = post_run_ok(sapi, dict(base, **spec))
            got = post_run_ok(sapi, dict(base, q=ids[0], k=ids[1], v=ids[2], block_table=table, seqlens_q=lq,
                                    seqlens_kv=lkv, page_size=16, num_pages=12))
            assert got["output"]["fingerprint"] == want["output"]["fingerprint"], name
            if name == "naive":  # verified on the GPU (math's fp32 reference), which holds the table
                checked = post_run_ok(sapi, dict(base, q=ids[0], k=ids[1], v=ids[2], block_table=table, seqlens_q=lq,
                                            seqlens_kv=lkv, page_size=16, num_pages=12, verify=True))
                assert checked["verify"]["reference"] == "gpu_math_fp32" and checked["verify"]["pass"], checked["verify"]
            # generated k and v read through the uploaded table: the same cache
            mixed = post_run_ok(sapi, dict(base, block_table=table, **spec))
            assert mixed["output"]["fingerprint"] == want["output"]["fingerprint"], name
        # sequences sharing pages (allowed): a generated cache holds the later sequence's token in a
        # shared slot, as the cpu path's order leaves it (made on the host then), attnd_ref likewise
        shared = np.array([[4, 0, 9], [0, 0, 0], [4, 5, 0], [9, 0, 0]], np.int32)
        q2, k2, v2 = gen.serving_inputs(seed, dict(lay, block_table=shared), 4, 64, "bf16", kv_heads=2)
        ids2 = [upload(sapi, a, "bf16") for a in (q2, k2, v2)] + [upload(sapi, shared, "int32")]
        try:
            base = dict(GQA, backend="naive", dtype="bf16", mask="causal", seed=seed)
            want = post_run_ok(sapi, dict(base, block_table=ids2[3], **spec))
            got = post_run_ok(sapi, dict(base, q=ids2[0], k=ids2[1], v=ids2[2], block_table=ids2[3], seqlens_q=lq,
                                    seqlens_kv=lkv, page_size=16, num_pages=12))
            assert got["output"]["fingerprint"] == want["output"]["fingerprint"]
        finally:
            for tid in ids2:
                sapi.request("DELETE", "/v1/tensors/%s" % tid)
        bad = upload(sapi, np.full(lay["block_table"].shape, 12, np.int32), "int32")  # one past the cache
        r = sapi.run(body=dict(GQA, backend="naive", dtype="bf16", block_table=bad, **spec))
        assert r.status_code == 400 and error_of(r)["field"] == "block_table", r.text[:500]
        sapi.request("DELETE", "/v1/tensors/%s" % bad)
    finally:
        for tid in ids + [table, lq, lkv]:
            sapi.request("DELETE", "/v1/tensors/%s" % tid)


# ---------------------------------------------------------------- kernels against PyTorch

def torch_padded_route(torch, F, name, lay, q, k, v, heads, mask, scale):
    """The PyTorch code naive, naive_inplace and math mirror (docs/serving.md): a call() that runs
    one forward over q, k, v in attnd's serving layouts (multi-head: kv_heads = heads). The index
    tensors and the 4-D masks are the caller's metadata, built once outside the call. Pages are
    gathered by index_select over the cache's rows (one kernel each for K and V, the issue's
    route): advanced indexing with three broadcast index tensors would first make each of them
    contiguous (ATen's AdvancedIndex on CUDA), three more kernels a gather that a serving stack
    building its indices once would not run."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    dev = q.device
    b, sq, skv = lay["batch"], lay["seq_q"], lay["seq_kv"]
    ragged, ps = lay["ragged"], lay.get("page_size") or 0
    d, dv = q.shape[-1], v.shape[-1]
    lq = torch.as_tensor(np.asarray(lay["seqlens_q"], np.int64), device=dev)
    lkv = torch.as_tensor(np.asarray(lay["seqlens_kv"], np.int64), device=dev)

    def tokens(lengths):  # each packed token's sequence and row
        bi = torch.repeat_interleave(torch.arange(b, device=dev), lengths)
        si = torch.cat([torch.arange(int(n), device=dev) for n in lengths.tolist()]) if int(lengths.sum()) else bi
        return bi, si

    b_q, s_q = tokens(lq)
    b_kv, s_kv = tokens(lkv)
    if ps:  # the cache's row ((page·ps + slot)·heads + h) of key j of head h of sequence b, [B·H·Skv]
        pos = torch.arange(skv, device=dev)
        token = torch.as_tensor(lay["block_table"], device=dev).long()[:, pos // ps] * ps + pos % ps
        cache_rows = (token[:, None, :] * heads + torch.arange(heads, device=dev)[None, :, None]).reshape(-1)
    rows, cols = torch.arange(sq, device=dev)[:, None], torch.arange(skv, device=dev)[None, :]
    if ragged:  # padding AND causal: [B, 1, Sq, Skv], True where a key is hidden
        lq4, lkv4 = lq[:, None, None, None], lkv[:, None, None, None]
        hi = lkv4 if mask == "none" else torch.minimum(rows + 1 + (lkv4 - lq4 if mask == "causal_bottom_right" else 0), lkv4)
        hidden = (cols >= hi).expand(b, 1, sq, skv).contiguous()
        keep = ~hidden  # SDPA's bool attn_mask: True where a key is seen
    else:
        hidden = (cols > rows) if mask == "causal" else None

    def dense(qp, kp, vp):
        if name == "math":
            with sdpa_kernel(SDPBackend.MATH):
                if ragged:
                    return F.scaled_dot_product_attention(qp, kp, vp, attn_mask=keep, scale=scale)
                return F.scaled_dot_product_attention(qp, kp, vp, is_causal=mask == "causal", scale=scale)
        s = qp @ kp.transpose(-2, -1)
        s = s * scale
        if hidden is not None:
            if name == "naive_inplace":
                s.masked_fill_(hidden, float("-inf"))
            else:
                s = s.masked_fill(hidden, float("-inf"))
        return torch.softmax(s, dim=-1) @ vp

    def call():
        qp = q
        if ragged:
            qp = q.new_zeros(b, heads, sq, d)
            qp.transpose(1, 2)[b_q, s_q] = q
        if ps:
            kp = k.reshape(-1, d).index_select(0, cache_rows).view(b, heads, skv, d)
            vp = v.reshape(-1, dv).index_select(0, cache_rows).view(b, heads, skv, dv)
        elif ragged:
            kp = k.new_zeros(b, heads, skv, d)
            kp.transpose(1, 2)[b_kv, s_kv] = k
            vp = v.new_zeros(b, heads, skv, dv)
            vp.transpose(1, 2)[b_kv, s_kv] = v
        else:
            kp, vp = k, v
        out = dense(qp, kp, vp)
        return out.transpose(1, 2)[b_q, s_q] if ragged else out

    return call


# (case, the kernels and memops docs/serving.md expects for naive, naive_inplace, math; 16-bit, MHA;
# the memops with one cuBLAS Memset, as at the study shape)
COUNT_CASES = [
    (dict(batch=4, seq_q=64, seq_kv=200, page_size=16, mask="causal"), {"naive": (7, 2), "naive_inplace": (7, 1),
                                                                         "math": (22, 0)}),
    (dict(batch=4, seq_q=1, seq_kv=200, page_size=16, mask="none"), {"naive": (6, 1), "naive_inplace": (6, 1),
                                                                      "math": (16, 0)}),
    (dict(seqlens_q=[64, 1, 30, 7], seqlens_kv=[200, 9, 30, 77], mask="causal"),
     {"naive": (12, 2), "naive_inplace": (12, 1), "math": (25, 0)}),
    (dict(seqlens_q=[64, 1, 30, 7], seqlens_kv=[200, 9, 30, 77], mask="none", page_size=16),
     {"naive": (10, 2), "naive_inplace": (10, 1), "math": (23, 0)}),
]


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("case,want", COUNT_CASES, ids=[case_id(c) for c, _ in COUNT_CASES])
def test_kernels_per_forward_equal_pytorch(sapi, name, case, want):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    from peer_pytorch import count_ops

    gen = load_gen()
    heads, d, seed = 8, 64, fresh_seed() % (2 ** 62)
    rec = post_run_ok(sapi, dict(backend=name, dtype="bf16", heads=heads, head_dim=d, seed=seed, warmup=1, iters=1,
                            profile=True, device="cuda:0", **case))
    ours = rec["kernels"]
    assert ours is not None and ours["dropped"] == 0, ours
    lay = gen.serving_layout(seed, **{k: v for k, v in case.items() if k != "mask"})
    arrays = gen.serving_inputs(seed, lay, heads, d, "bf16")
    dev = torch.device("cuda:0")
    q, k, v = (torch.from_numpy(np.ascontiguousarray(a).view(np.int16)).view(torch.bfloat16).to(dev) for a in arrays)
    call = torch_padded_route(torch, F, name, lay, q, k, v, heads, case["mask"], 1.0 / math.sqrt(d))
    call()  # warm: cuBLAS handles, the caching allocator
    torch.cuda.synchronize()
    kernels, memcpy, memset = count_ops(torch, call)
    table = ["%dx %s" % (t["calls"], t["name"][:50]) for t in ours["table"]]
    fact("serving %s %s ops attnd/torch" % (name, case_id(case)), "%d+%d / %d+%d" % (
        ours["per_forward"], ours["memops_per_forward"], len(kernels), len(memcpy) + len(memset)))
    assert ours["per_forward"] == len(kernels), "kernels: attnd %d %r, PyTorch %d %r" % (
        ours["per_forward"], table, len(kernels), [n[:70] for n in kernels])
    assert ours["memops_per_forward"] == len(memcpy) + len(memset), (table, memcpy, memset)
    # the documented kernels (docs/serving.md); memops vary with cuBLAS's Memsets, PyTorch's say
    assert ours["per_forward"] == want[name][0], (table, want[name])
