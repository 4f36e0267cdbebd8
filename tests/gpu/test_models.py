"""Today's models on the GPU: grouped K/V heads, value head dims of their own and sliding
windows, in every variant that says it runs them (`features` in GET /v1/variants), against the
fp64 reference on fresh seeds and odd sizes; what a variant does not run is refused by name;
naive and math launch what PyTorch launches for the same call (torch.profiler)."""
import math

import pytest

from attnd_gpu_helpers import error_of, fact, fresh_seed

# (name, parameters): odd sizes, Sq != Skv both ways, MQA and a group of two, every mask with
# a window, a window of one key, one longer than the keys.
CASES = [
    ("gqa_mqa", dict(heads=4, kv_heads=1, seq=77, head_dim=64, mask="causal")),
    ("gqa_half", dict(heads=6, kv_heads=3, seq_q=33, seq_kv=100, head_dim=64, mask="causal_bottom_right")),
    ("gqa_decode", dict(heads=8, kv_heads=2, seq_q=1, seq_kv=1000, head_dim=128, mask="none")),
    ("window_causal", dict(heads=4, seq=1000, head_dim=64, mask="causal", window=63)),
    ("window_one_key", dict(heads=2, seq=77, head_dim=64, mask="causal", window=0)),
    ("window_bottom_right", dict(heads=2, seq_q=50, seq_kv=130, head_dim=64, mask="causal_bottom_right", window=17)),
    ("window_none", dict(heads=2, seq=129, head_dim=64, mask="none", window=9)),
    ("window_past_keys", dict(heads=2, seq=64, head_dim=64, mask="causal", window=500)),
    ("gqa_window", dict(heads=8, kv_heads=2, seq=300, head_dim=128, mask="causal", window=100)),
    ("head_dim_v", dict(heads=4, seq=77, head_dim=192, head_dim_v=128, mask="causal")),
    ("head_dim_v_gqa_window", dict(heads=4, kv_heads=2, seq=100, head_dim=192, head_dim_v=128, mask="causal",
                                   window=31)),
]

FEATURE_OF = {"kv_heads": "kv_heads", "head_dim_v": "head_dim_v", "window": "window"}


def features_of(params):
    return {FEATURE_OF[k] for k in params if k in FEATURE_OF}


@pytest.mark.parametrize("name,shape", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("backend", ["naive", "naive_inplace", "math", "efficient", "flash", "cudnn", "flashinfer"])
def test_matches_the_reference_or_is_refused_by_name(gapi, variants, backend, name, shape):
    v = variants.get(backend)
    if v is None or not v["available"]:
        pytest.skip("%s is not available here: %s" % (backend, v and v["why"]))
    params = dict(backend=backend, batch=2, dtype="bf16", seed=fresh_seed(), iters=2, warmup=1, verify="true", **shape)
    missing = features_of(shape) - set(v.get("features", []))
    r = gapi.run(params)
    if missing:
        err = error_of(r)
        assert r.status_code == 422 and err["code"] == "unsupported" and err["field"] in missing, (r.status_code, err)
        return
    if r.status_code == 422 and backend == "cudnn":
        err = error_of(r)
        assert "cuDNN" in err["message"], err  # cuDNN's own refusal, named as such
        fact("cudnn refuses %s" % name, err["message"][:120])
        return
    assert r.status_code == 200, r.text[:600]
    rec = r.json()
    assert rec["status"] == "done", rec.get("error")
    ver = rec["verify"]
    assert ver and ver["pass"] is True, "%s %s: %r" % (backend, name, ver)
    assert rec["output"]["nan"] == 0 and rec["output"]["shape"][3] == shape.get("head_dim_v", shape["head_dim"])
    fact("%s %s rel_l2_err" % (backend, name), ver["rel_l2_err"])


def torch_kernel_counts(call):
    """Kernels and memops of one call, from torch.profiler (bench/peer_pytorch.py's count)."""
    import sys
    import os
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
    import torch
    from peer_pytorch import count_ops

    call()
    torch.cuda.synchronize()
    kernels, memcpy, memset = count_ops(torch, call)
    return kernels, len(memcpy) + len(memset)


# The calls PyTorch users write: transformers' eager attention with repeat_kv for naive, SDPA's
# math backend with enable_gqa=True (and a bool attn_mask for a window) for math.
COUNT_CASES = [
    ("naive", dict(batch=2, heads=8, kv_heads=2, seq=1024, head_dim=64, mask="causal")),
    ("naive_inplace", dict(batch=2, heads=8, kv_heads=2, seq=1024, head_dim=64, mask="causal")),
    ("math", dict(batch=2, heads=8, kv_heads=2, seq=1024, head_dim=64, mask="causal")),
    ("math", dict(batch=2, heads=8, kv_heads=2, seq=1024, head_dim=64, mask="causal", window=255)),
    ("naive", dict(batch=2, heads=8, seq=1024, head_dim=64, mask="causal", window=255)),
]


@pytest.mark.parametrize("backend,shape", COUNT_CASES,
                         ids=["%s-%s" % (b, "-".join("%s%s" % kv for kv in s.items())) for b, s in COUNT_CASES])
def test_naive_and_math_launch_what_pytorch_launches(gapi, variants, backend, shape):
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    if not variants[backend]["available"]:
        pytest.skip(variants[backend]["why"])
    rec = gapi.run_ok(backend=backend, dtype="bf16", seed=fresh_seed(), iters=2, warmup=1, profile="true", **shape)
    b, h, s, d = shape["batch"], shape["heads"], shape["seq"], shape["head_dim"]
    hkv = shape.get("kv_heads", h)
    window = shape.get("window")
    dev = torch.device("cuda:0")
    q = torch.randn(b, h, s, d, dtype=torch.bfloat16, device=dev)
    k = torch.randn(b, hkv, s, d, dtype=torch.bfloat16, device=dev)
    v = torch.randn(b, hkv, s, d, dtype=torch.bfloat16, device=dev)
    scale = 1.0 / math.sqrt(d)
    # the mask a user builds once: True where a key is visible
    i = torch.arange(s, device=dev)
    visible = i[None, :] <= i[:, None]
    if window is not None:
        visible &= i[None, :] >= i[:, None] - window

    def repeat_kv(x, n):  # transformers' models/llama/modeling_llama.py
        bb, hh, ss, dd = x.shape
        return x if n == 1 else x[:, :, None, :, :].expand(bb, hh, n, ss, dd).reshape(bb, hh * n, ss, dd)

    if backend in ("naive", "naive_inplace"):
        masked = ~visible

        def call():
            kk, vv = repeat_kv(k, h // hkv), repeat_kv(v, h // hkv)
            sc = (q @ kk.transpose(-2, -1)) * scale
            sc = sc.masked_fill_(masked, float("-inf")) if backend == "naive_inplace" else sc.masked_fill(masked,
                                                                                                           float("-inf"))
            return torch.softmax(sc, dim=-1) @ vv
    else:
        def call():
            with sdpa_kernel(SDPBackend.MATH):
                if window is None:
                    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=True)
                return F.scaled_dot_product_attention(q, k, v, attn_mask=visible, scale=scale, enable_gqa=True)

    kernels, memops = torch_kernel_counts(call)
    ours = rec["kernels"]
    fact("%s %s kernels attnd/torch" % (backend, shape), "%s+%s / %s+%s" % (ours["per_forward"],
                                                                       ours["memops_per_forward"], len(kernels),
                                                                       memops))
    assert ours["per_forward"] == len(kernels), "attnd %s, PyTorch %s: %s" % (
        [t["name"][:40] for t in ours["table"]], ours["per_forward"], [n[:40] for n in kernels])
