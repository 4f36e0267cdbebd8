"""clients/python/attnd_ref (the numpy port) against golden values from the C code.

The constants here are the ones tests/unit/kernels/test_inputs.c checks and docs/inputs.md /
docs/fingerprint.md show: they came from running kernels/cpu/inputs_cpu.c and
kernels/fingerprint.c once. No compiler and no server needed.
"""

import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "clients", "python"))

from attnd_ref import gen  # noqa: E402

GOLD_KEY = [0x8209B480FAED1B10, 0x6C23AACCA1387409, 0x608EF4CA05464192]
GOLD_BF16 = [
    [0xBE35, 0x3F95, 0xC01E, 0x3D56, 0xBFEB, 0x3E8D, 0xBF5A, 0xBF5A],
    [0x3EEF, 0xBA80, 0xBF2C, 0x3FA0, 0x3F3B, 0x3FC8, 0x3F44, 0x3FD6],
    [0xBDE0, 0x3ED0, 0xBFC8, 0x3FC5, 0xBF31, 0x3F42, 0x3FA9, 0xBF03],
]
GOLD_FP16 = [
    [0xB1A9, 0x3CAC, 0xC0F1, 0x2AB3, 0xBF5B, 0x3466, 0xBACE, 0xBACC],
    [0x3778, 0x9401, 0xB962, 0x3D04, 0x39D7, 0x3E3D, 0x3A23, 0x3EB0],
    [0xAEFD, 0x367C, 0xBE41, 0x3E2C, 0xB984, 0x3A11, 0x3D44, 0xB817],
]
GOLD_FP32 = [
    [0xBE352277, 0x3F95779A, 0xC01E163B, 0x3D56575E, 0xBFEB6051, 0x3E8CC196, 0xBF59C8FC, 0xBF598E18],
    [0x3EEF026D, 0xBA802BF8, 0xBF2C4735, 0x3FA077EA, 0x3F3ADA0C, 0x3FC7993B, 0x3F4459D8, 0x3FD5F8F9],
    [0xBDDFA6AC, 0x3ECF8576, 0xBFC82210, 0x3FC575E7, 0xBF3088AB, 0x3F422377, 0x3FA88275, 0xBF02D134],
]
GOLD_FINGERPRINTS = [
    (b"", 0x0000000000000000),
    (b"attnd fingerprint", 0x29D49204022D5DC6),
    (bytes(range(256)), 0xFA7B60C60A11A9A3),
    (bytes(range(13)), 0x60EA6102D2BE1F62),
]


def test_mix64():
    got = gen.mix64(np.array([0, 1], dtype=np.uint64))
    assert [int(x) for x in got] == [0, 0x5692161D100B05E5]


@pytest.mark.parametrize("t", [0, 1, 2])
def test_golden_inputs(t):
    assert gen.tensor_key(0, t) == GOLD_KEY[t]
    assert gen.tensor_key(0, "qkv"[t]) == GOLD_KEY[t]
    assert [int(x) for x in gen.generate(0, t, 8, "bf16")] == GOLD_BF16[t]
    fp16 = gen.generate(0, t, 8, "fp16")
    assert fp16.dtype == np.float16
    assert [int(x) for x in fp16.view(np.uint16)] == GOLD_FP16[t]
    fp32 = gen.generate(0, t, 8, "fp32")
    assert fp32.dtype == np.float32
    assert [int(x) for x in fp32.view(np.uint32)] == GOLD_FP32[t]


def test_offset_is_a_slice():
    whole = gen.generate(5, "v", 1000, "bf16")
    assert np.array_equal(gen.generate(5, "v", 100, "bf16", first=900), whole[900:])


@pytest.mark.parametrize("data,want", GOLD_FINGERPRINTS)
def test_golden_fingerprint(data, want):
    assert gen.fingerprint(data) == want
    assert gen.fingerprint(np.frombuffer(data, dtype=np.uint8)) == want


def test_fingerprint_is_order_sensitive():
    a = np.arange(64, dtype=np.uint16)
    b = a.copy()
    b[[3, 40]] = b[[40, 3]]
    assert gen.fingerprint(a) != gen.fingerprint(b)


def test_fp16_rounding_matches_numpy():
    rng = np.random.default_rng(0)
    # every float32 exponent, random mantissas; plus the fp16 range densely, both signs
    bits = rng.integers(0, 2**32, size=500_000, dtype=np.uint64).astype(np.uint32)
    dense = rng.uniform(-70000, 70000, size=250_000).astype(np.float32)
    small = (rng.uniform(-1, 1, size=250_000) * 2.0 ** rng.integers(-30, -10, size=250_000)).astype(np.float32)
    x = np.concatenate([bits.view(np.float32), dense, small])
    x = x[~np.isnan(x)]
    edges = np.array(
        [0.0, -0.0, 65504, 65519.99, 65520, 1e10, -1e10, np.inf, -np.inf, 2**-24, 2**-25, 3 * 2**-25, 2**-14],
        dtype=np.float32,
    )
    x = np.concatenate([x, edges, np.nextafter(edges, np.float32(np.inf)), np.nextafter(edges, np.float32(0))])
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    got = gen.round_fp16_bits(x)
    assert np.array_equal(got, want), f"{np.count_nonzero(got != want)} of {x.size} differ"
    assert np.all(np.isnan(gen.round_fp16_bits(np.array([np.nan], np.float32)).view(np.float16)))


def test_bf16_rounding():
    x = np.array([1.0, 1.00390625, 1.01171875, 3.4028235e38, -np.inf, -0.0], dtype=np.float32)
    # 1 + 2^-8 is a tie between 0x3f80 and 0x3f81: even wins; 1 + 3·2^-8 ties up to 0x3f82
    assert [int(b) for b in gen.round_bf16_bits(x)] == [0x3F80, 0x3F80, 0x3F82, 0x7F80, 0xFF80, 0x8000]
    nan = gen.round_bf16_bits(np.array([0x7F800001], dtype=np.uint32).view(np.float32))[0]
    assert (int(nan) & 0x7F80) == 0x7F80 and (int(nan) & 0x7F) != 0
    # bf16 is the top half of float32 for values that need no rounding
    y = gen.values_f32(3, "q", 10000)
    r = gen.bf16_bits_to_f32(gen.round_bf16_bits(y))
    assert np.all(np.abs(r - y) <= np.abs(y) * 2.0**-8)


def test_statistics():
    x = gen.generate(12345, "q", 1 << 20, "fp32").astype(np.float64)
    assert abs(x.mean()) < 0.005
    assert abs(x.var() - 1.0) < 0.01
    assert x.min() >= -3.47 and x.max() <= 3.47
    k = gen.generate(12345, "k", 1 << 20, "fp32").astype(np.float64)
    assert abs(np.mean(x * k)) < 0.005


def _loop_attention(q, k, v, mask, scale):
    b, h, sq, d = q.shape
    skv = k.shape[2]
    out = np.zeros((b, h, sq, d))
    for bi in range(b):
        for hi in range(h):
            for i in range(sq):
                n = skv if mask == "none" else (i + 1 if mask == "causal" else i + skv - sq + 1)
                n = max(0, min(n, skv))
                if n == 0:
                    continue
                s = [scale * sum(q[bi, hi, i, c] * k[bi, hi, j, c] for c in range(d)) for j in range(n)]
                m = max(s)
                p = [math.exp(x - m) for x in s]
                out[bi, hi, i] = sum(p[j] * v[bi, hi, j] for j in range(n)) / sum(p)
    return out


@pytest.mark.parametrize("mask", ["none", "causal", "causal_bottom_right"])
@pytest.mark.parametrize("sq,skv,d", [(5, 5, 4), (7, 3, 2), (3, 7, 1), (1, 1, 3)])
def test_reference_attention(mask, sq, skv, d):
    q, k, v = gen.inputs(1, 2, 2, sq, skv, d, "bf16")
    qf, kf, vf = (gen.to_float64(t) for t in (q, k, v))
    want = _loop_attention(qf, kf, vf, mask, 1 / math.sqrt(d))
    got = gen.reference_attention(q, k, v, mask)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-300)
    if mask == "causal_bottom_right" and sq > skv:
        assert np.all(got[:, :, : sq - skv] == 0)


def test_compare():
    q, k, v = gen.inputs(2, 1, 2, 16, 16, 8, "fp16")
    ref = gen.reference_attention(q, k, v, "causal")
    out = ref.astype(np.float32).astype(np.float16)
    res = gen.compare(out, ref, "fp16")
    assert res["pass"] and res["max_abs_err"] < 1e-3
    out[0, 0, 3, 1] = np.float16(np.nan)
    assert not gen.compare(out, ref, "fp16")["pass"]


# ---------------------------------------------------------------- serving batches
# The same golden values as tests/unit/common/test_run_request.c (drawn lengths) and
# tests/unit/kernels/test_inputs.c (page order, block table, a paged cache's bytes).

def test_golden_seqlens_draws():
    assert gen.draw_seqlens(0, "q", 6, 1, 8).tolist() == [1, 7, 6, 2, 7, 2]
    assert gen.draw_seqlens(0, "kv", 6, 100, 199).tolist() == [121, 148, 124, 170, 111, 179]
    assert gen.seqlens(0, "kv", "uniform:100:199", 6).tolist() == [121, 148, 124, 170, 111, 179]
    assert gen.seqlens(0, "q", "3,0,1").tolist() == [3, 0, 1]


def test_golden_page_order_and_paged_cache():
    assert gen.page_order(0, 12).tolist() == [0, 7, 6, 11, 4, 8, 5, 3, 9, 1, 2, 10]
    lay = gen.serving_layout(5, seq_q=2, seqlens_kv=[5, 0, 17], page_size=4)
    assert lay["batch"] == 3 and lay["seq_kv"] == 17 and lay["num_pages"] == 9  # 7 needed, a quarter more
    assert lay["block_table"].ravel().tolist() == [4, 8, 0, 0, 0, 0, 0, 0, 0, 0, 5, 6, 3, 2, 0]
    assert lay["cu_seqlens_kv"].tolist() == [0, 5, 5, 22] and lay["cu_seqlens_q"].tolist() == [0, 2, 4, 6]
    q, k, v = gen.serving_inputs(5, lay, 2, 4, "bf16", kv_heads=1, head_dim_v=3)
    assert (q.shape, k.shape, v.shape) == ((6, 2, 4), (9, 4, 1, 4), (9, 4, 1, 3))
    assert gen.fingerprint_hex(q) == "716b0699d4c23b1c"
    assert gen.fingerprint_hex(k) == "bb2825a8f6cbd178"
    assert gen.fingerprint_hex(v) == "b99c7c3cc01966a1"


def test_num_pages_default():
    assert [gen.num_pages_default(n) for n in (0, 1, 4, 5, 7, 100)] == [1, 2, 5, 7, 9, 125]


def _loop_serving(q, k, v, lay, heads, hkv, mask, window, scale):
    """Each sequence's rows by the definitions, one key at a time (the layouts of docs/api.md)."""
    dv = v.shape[-1]
    ps = lay.get("page_size", 0)
    out = np.zeros((int(lay["cu_seqlens_q"][-1]), heads, dv) if lay["ragged"] else (lay["batch"], heads, lay["seq_q"], dv))
    kf = k.reshape(-1, hkv, k.shape[-1]) if ps else k
    vf = v.reshape(-1, hkv, dv) if ps else v
    for b in range(lay["batch"]):
        sq, skv = int(lay["seqlens_q"][b]), int(lay["seqlens_kv"][b])
        for h in range(heads):
            g = h // (heads // hkv)
            for i in range(sq):
                qi = q[lay["cu_seqlens_q"][b] + i, h] if lay["ragged"] else q[b, h, i]
                pos = i + (skv - sq if mask == "causal_bottom_right" else 0)
                keys = [j for j in range(skv) if (mask == "none" or j <= pos) and (window is None or j >= pos - window)]
                rows = []
                for j in keys:
                    if ps:
                        slot = lay["block_table"][b][j // ps] * ps + j % ps
                        rows.append((kf[slot, g], vf[slot, g]))
                    elif lay["ragged"]:
                        rows.append((k[lay["cu_seqlens_kv"][b] + j, g], v[lay["cu_seqlens_kv"][b] + j, g]))
                    else:
                        rows.append((k[b, g, j], v[b, g, j]))
                if not rows:
                    continue
                s = np.array([scale * float(np.dot(qi, kj)) for kj, _ in rows])
                p = np.exp(s - s.max())
                o = sum(pj * vj for pj, (_, vj) in zip(p, rows)) / p.sum()
                if lay["ragged"]:
                    out[lay["cu_seqlens_q"][b] + i, h] = o
                else:
                    out[b, h, i] = o
    return out


@pytest.mark.parametrize("kw", [
    dict(seqlens_q=[3, 0, 1, 4], seqlens_kv=[6, 0, 9, 1], page_size=4),
    dict(seqlens_q=[3, 0, 1, 4], seqlens_kv=[6, 0, 9, 1]),
    dict(seq_q=2, seqlens_kv="uniform:0:9", batch=3, page_size=1),
    dict(seqlens_q="2,5", seq_kv=7),
    dict(batch=2, seq_q=3, seq_kv=10, page_size=3),
])
@pytest.mark.parametrize("mask,window", [("causal", None), ("causal_bottom_right", 2), ("none", None)])
def test_serving_reference(kw, mask, window):
    lay = gen.serving_layout(6, **kw)
    q, k, v = gen.serving_inputs(6, lay, 4, 3, "fp32", kv_heads=2, head_dim_v=2)
    qf, kf, vf = (t.astype(np.float64) for t in (q, k, v))
    got = gen.serving_reference(q, k, v, lay, 4, mask=mask, window=window, kv_heads=2)
    want = _loop_serving(qf, kf, vf, lay, 4, 2, mask, window, 1 / math.sqrt(3))
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    if lay.get("page_size"):  # the paged cache holds the contiguous twin's values
        twin = gen.serving_layout(6, **dict(kw, page_size=0))
        q2, k2, v2 = gen.serving_inputs(6, twin, 4, 3, "fp32", kv_heads=2, head_dim_v=2)
        assert np.array_equal(q, q2)
        np.testing.assert_array_equal(gen.serving_reference(q2, k2, v2, twin, 4, mask=mask, window=window, kv_heads=2), got)
