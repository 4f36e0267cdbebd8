"""Regenerate attnd's inputs bit for bit, recompute its fingerprints, check its outputs.

A numpy port of kernels/inputs.h, kernels/dtype_convert.h, kernels/fingerprint.h and the
fp64 reference of kernels/reference.c (docs/inputs.md, docs/fingerprint.md,
docs/verify.md). Everything is vectorised; uint64 array arithmetic in numpy wraps mod 2^64,
which is exactly the C semantics.

    >>> from attnd_ref import generate, fingerprint
    >>> q = generate(0, "q", 8 * 16 * 1024 * 64, "bf16")     # uint16 bf16 bits
    >>> fingerprint(out_bytes) == run["output"]["fingerprint"]  # see docs for the format
"""

import math

import numpy as np

_M64 = (1 << 64) - 1
_TENSOR_MUL = 0xD1B54A32D192ED03
_GOLDEN = 0x9E3779B97F4A7C15
_UNIT_SCALE = np.float32(float.fromhex("0x1.bb67aep-16"))  # ≈ 1/37837.23: unit variance
_TENSORS = {"q": 0, "k": 1, "v": 2}

# Tolerances against the fp64 reference (server/worker/output_stats.h, docs/verify.md).
TOLERANCES = {"bf16": (4e-2, 1.6e-2), "fp16": (5e-3, 2e-3), "fp32": (1e-4, 1e-5)}


def mix64(z):
    """SplitMix64's finaliser on a uint64 array (or anything np.asarray makes uint64)."""
    z = np.asarray(z, dtype=np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def tensor_key(seed, tensor):
    """key = mix64(seed ^ ((t + 1) · 0xD1B54A32D192ED03)); tensor is 0/1/2 or "q"/"k"/"v"."""
    t = _TENSORS.get(tensor, tensor)
    return int(mix64(np.array([(int(seed) & _M64) ^ (((t + 1) * _TENSOR_MUL) & _M64)], dtype=np.uint64))[0])


def values_f32(seed, tensor, n, first=0):
    """Elements [first, first + n) of a tensor as float32, before rounding to its dtype."""
    key = np.uint64(tensor_key(seed, tensor))
    idx = np.arange(first + 1, first + n + 1, dtype=np.uint64)
    h = mix64(key + idx * np.uint64(_GOLDEN))
    lanes = (
        (h & np.uint64(0xFFFF)).astype(np.int32)
        + ((h >> np.uint64(16)) & np.uint64(0xFFFF)).astype(np.int32)
        + ((h >> np.uint64(32)) & np.uint64(0xFFFF)).astype(np.int32)
        + (h >> np.uint64(48)).astype(np.int32)
    )
    s = lanes - np.int32(131070)
    return s.astype(np.float32) * _UNIT_SCALE  # exact int→float, one RNE float32 multiply


def round_bf16_bits(x):
    """float32 → bfloat16 bits (uint16), round to nearest even; NaN stays a quiet NaN."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    nan = (u & np.uint64(0x7FFFFFFF)) > np.uint64(0x7F800000)
    r = (u + np.uint64(0x7FFF) + ((u >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
    r = np.where(nan, (u >> np.uint64(16)) | np.uint64(0x0040), r)
    return (r & np.uint64(0xFFFF)).astype(np.uint16)


def round_fp16_bits(x):
    """float32 → IEEE binary16 bits (uint16), round to nearest even, the algorithm of
    dtype_convert.h step for step (numpy's astype(float16) gives the same bits)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.int64)
    sign = (u >> 16) & 0x8000
    a = u & 0x7FFFFFFF
    # normal range: rebias the exponent 127 → 15, round at bit 13
    r = a - 0x38000000
    normal = (r + 0x0FFF + ((r >> 13) & 1)) >> 13
    # subnormal range (below 2^-14): round(value / 2^-24)
    mant = (a & 0x007FFFFF) | 0x00800000
    shift = np.clip(126 - (a >> 23), 1, 63)
    half = mant >> shift
    rem = mant & ((np.int64(1) << shift) - 1)
    halfway = np.int64(1) << (shift - 1)
    half = half + ((rem > halfway) | ((rem == halfway) & ((half & 1) == 1)))
    sub = np.where(a < 0x33000000, 0, half)
    out = np.where(a < 0x38800000, sub, normal)
    out = np.where(a >= 0x477FF000, 0x7C00, out)
    out = np.where(a > 0x7F800000, 0x7E00, out)
    return (sign | out).astype(np.uint16)


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def generate(seed, tensor, n, dtype, first=0):
    """n elements of tensor ("q"/"k"/"v" or 0/1/2) for seed, as attnd makes them:
    bf16 as uint16 bit patterns, fp16 as float16, fp32 as float32."""
    x = values_f32(seed, tensor, n, first)
    if dtype == "fp32":
        return x
    if dtype == "bf16":
        return round_bf16_bits(x)
    if dtype == "fp16":
        return round_fp16_bits(x).view(np.float16)
    raise ValueError(f"unknown dtype {dtype!r} (bf16, fp16, fp32)")


def inputs(seed, batch, heads, seq_q, seq_kv, head_dim, dtype):
    """q [B,H,Sq,D], k and v [B,H,Skv,D] of a run, in the layout attnd uses."""
    q = generate(seed, "q", batch * heads * seq_q * head_dim, dtype).reshape(batch, heads, seq_q, head_dim)
    k = generate(seed, "k", batch * heads * seq_kv * head_dim, dtype).reshape(batch, heads, seq_kv, head_dim)
    v = generate(seed, "v", batch * heads * seq_kv * head_dim, dtype).reshape(batch, heads, seq_kv, head_dim)
    return q, k, v


def to_float64(a, dtype=None):
    """An attnd tensor as float64; uint16 arrays (or dtype "bf16") are bf16 bit patterns."""
    a = np.asarray(a)
    if dtype == "bf16" or a.dtype == np.uint16:
        return bf16_bits_to_f32(a).astype(np.float64)
    return a.astype(np.float64)


def fingerprint(data):
    """The 64-bit fingerprint of bytes (docs/fingerprint.md), as a Python int. `data` may be
    bytes, bytearray, memoryview or a numpy array (its raw bytes, row-major)."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data).tobytes()
    b = bytes(data)
    n = len(b)
    b += b"\0" * (-n % 8)
    w = np.frombuffer(b, dtype="<u8").astype(np.uint64)
    idx = np.arange(1, len(w) + 1, dtype=np.uint64)
    total = int(np.sum(mix64(w + idx * np.uint64(_GOLDEN)), dtype=np.uint64)) if len(w) else 0
    return int(mix64(np.array([(n ^ total) & _M64], dtype=np.uint64))[0])


def fingerprint_hex(data):
    """The fingerprint as a run's "output.fingerprint" spells it: 16 lowercase hex digits."""
    return format(fingerprint(data), "016x")


def visible_keys(mask, seq_q, seq_kv):
    """Keys each query row sees (a prefix): attn_visible_keys of kernels/attn.h."""
    rows = np.arange(seq_q, dtype=np.int64)
    if mask in (None, False, "none"):
        return np.full(seq_q, seq_kv, dtype=np.int64)
    if mask in (True, "causal"):
        n = rows + 1
    elif mask == "causal_bottom_right":
        n = rows + seq_kv - seq_q + 1
    else:
        raise ValueError(f"unknown mask {mask!r}")
    return np.clip(n, 0, seq_kv)


def reference_attention(q, k, v, mask="causal", scale=None):
    """softmax(scale · q·kᵀ + mask) · v in float64, fully masked rows zeros (SDPA's safe
    softmax). q [..., Sq, D], k and v [..., Skv, D]; uint16 inputs are bf16 bits."""
    q, k, v = to_float64(q), to_float64(k), to_float64(v)
    sq, d = q.shape[-2], q.shape[-1]
    skv = k.shape[-2]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    s = scale * (q @ np.swapaxes(k, -1, -2))
    vis = visible_keys(mask, sq, skv)
    allowed = np.arange(skv)[None, :] < vis[:, None]  # [Sq, Skv]
    s = np.where(allowed, s, -np.inf)
    mx = np.max(s, axis=-1, keepdims=True)
    mx = np.where(np.isfinite(mx), mx, 0.0)
    p = np.where(allowed, np.exp(s - mx), 0.0)
    tot = np.sum(p, axis=-1, keepdims=True)
    out = (p @ v) / np.where(tot > 0, tot, 1.0)
    return np.where(vis[:, None] > 0, out, 0.0)


def compare(out, ref, dtype):
    """attnd's verify object for an output (as returned by generate-like dtypes) against a
    float64 reference: max_abs_err, rel_l2_err = ‖out − ref‖₂ / ‖ref‖₂, tolerances, pass."""
    o = to_float64(out, dtype).ravel()
    r = np.asarray(ref, dtype=np.float64).ravel()
    tol_abs, tol_rel = TOLERANCES[dtype]
    bad = int(np.count_nonzero(~np.isfinite(o)))
    diff = o - r
    max_abs = float(np.max(np.abs(diff))) if o.size else 0.0
    norm = float(np.linalg.norm(r))
    rel = float(np.linalg.norm(diff) / norm) if norm > 0 else float(np.linalg.norm(diff))
    if bad:
        max_abs = rel = float("nan")
    return {
        "reference": "numpy_fp64",
        "max_abs_err": max_abs,
        "rel_l2_err": rel,
        "tol": {"abs": tol_abs, "rel_l2": tol_rel},
        "nan": bad,
        "pass": bad == 0 and max_abs <= tol_abs and rel <= tol_rel,
    }
