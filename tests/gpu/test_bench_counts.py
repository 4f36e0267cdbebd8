"""naive, naive_inplace and math launch what PyTorch launches at every bench shape, the large
ones included: above 2^31 bytes of scores PyTorch's TensorIterator kernels launch once per
32-bit indexable part (kernels/index32.h), and attnd copies the split. Kernels and memops
(Memcpy, cuBLAS Memsets) of one profiled forward against torch.profiler of the bench's own
PyTorch calls (bench/peer_pytorch.py), same process order as bench/run.sh: attnd first, then
PyTorch, whose cached memory is given back before the next shape.

Expected from PyTorch 2.11's source (kernels/NOTES-decomposed.md):
    shape                       naive  naive_inplace  math
    B8 H16 S1024 D64 causal     7      6              20    (the study shape: nothing splits)
    B2 H16 S8192 D128 causal    10     9              33
    B4 H16 S4096 D128 causal    8      7              24
    B4 H16 S4096 D128 none      6      6              17
The largest needs ~20 GiB on either side (math's fp32 scores are 8 GiB)."""
import math
import os
import sys

import pytest

from attnd_gpu_helpers import fact, fresh_seed

SHAPES = [
    dict(batch=8, heads=16, seq=1024, head_dim=64, mask="causal"),
    dict(batch=2, heads=16, seq=8192, head_dim=128, mask="causal"),
    dict(batch=4, heads=16, seq=4096, head_dim=128, mask="causal"),
    dict(batch=4, heads=16, seq=4096, head_dim=128, mask="none"),
]
VARIANTS = ["naive", "naive_inplace", "math"]


def shape_id(s):
    return "B%d-H%d-S%d-D%d-%s" % (s["batch"], s["heads"], s["seq"], s["head_dim"], s["mask"])


def torch_ops(variant, shape):
    """(kernel names, memop names) of one PyTorch forward, as bench/peer_pytorch.py counts them."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    from peer_pytorch import count_ops, make_variants

    fn = make_variants(torch, F)[variant]
    dev = torch.device("cuda:0")
    b, h, s, d = shape["batch"], shape["heads"], shape["seq"], shape["head_dim"]
    try:
        q, k, v = (torch.randn(b, h, s, d, dtype=torch.bfloat16, device=dev) for _ in range(3))
        mask = torch.ones(s, s, dtype=torch.bool, device=dev).triu(1) if shape["mask"] == "causal" else None
        scale = 1.0 / math.sqrt(d)

        def call():
            ctx = getattr(fn, "context", None)
            if ctx is None:
                return fn(q, k, v, mask, scale)
            with ctx():
                return fn(q, k, v, mask, scale)

        call()  # warm: cuBLAS handles, workspaces, the caching allocator
        torch.cuda.synchronize()
        kernels, memcpy, memset = count_ops(torch, call)
        return kernels, memcpy + memset
    finally:
        q = k = v = mask = None
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES, ids=[shape_id(s) for s in SHAPES])
def test_counts_equal_pytorch_at_bench_shapes(gapi, variants, variant, shape):
    pytest.importorskip("torch")
    if not variants[variant]["available"]:
        pytest.skip(variants[variant]["why"])
    rec = gapi.run_ok(backend=variant, dtype="bf16", seed=fresh_seed(), iters=1, warmup=1, profile="true", **shape)
    ours = rec["kernels"]
    assert ours is not None and ours["dropped"] == 0, ours
    kernels, memops = torch_ops(variant, shape)
    fact("%s %s ops attnd/torch" % (variant, shape_id(shape)), "%d+%d / %d+%d" % (
        ours["per_forward"], ours["memops_per_forward"], len(kernels), len(memops)))
    table = ["%dx %s" % (t["calls"], t["name"][:50]) for t in ours["table"]]
    theirs = [n[:70] for n in kernels + memops]
    assert ours["per_forward"] == len(kernels), "kernels: attnd %d %r, PyTorch %d %r" % (
        ours["per_forward"], table, len(kernels), theirs)
    assert ours["memops_per_forward"] == len(memops), "memops: attnd %d %r, PyTorch %d %r" % (
        ours["memops_per_forward"], table, len(memops), theirs)
