"""clients/python/attnd_ref (the numpy port) against golden values from the C code.

The constants here are the ones tests/unit/kernels/test_inputs.c checks and docs/inputs.md /
docs/fingerprint.md show: they came from running kernels/inputs_cpu.c and
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
