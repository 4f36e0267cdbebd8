"""Regenerate attnd's inputs bit for bit, recompute its fingerprints, check its outputs.

A numpy port of kernels/inputs.h, kernels/dtype_convert.h, kernels/fingerprint.h and the
fp64 reference of kernels/cpu/reference.c (docs/inputs.md, docs/fingerprint.md,
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


# ---------------------------------------------------------------- serving batches
# Ragged batches and paged K/V caches (docs/inputs.md#serving-batches, docs/api.md#ragged-batches):
# the lengths a distribution draws, the page order, the block table, the inputs as a run stores
# them, and the fp64 reference over them. kernels/seq_layout.c, kernels/cpu/inputs_cpu.c and
# common/run_request.c are the C these follow.

_STREAM_K_FILL, _STREAM_V_FILL, _STREAM_PAGES, _STREAM_SEQLENS_Q, _STREAM_SEQLENS_KV = 3, 4, 5, 6, 7
MAX_TOKENS = (1 << 31) - 1


def _draws(seed, stream, n):
    """Draws 0 .. n-1 of a stream (common/seeded.h): mix64(key + (i + 1) · golden), uint64."""
    key = np.uint64(tensor_key(seed, stream))
    return mix64(key + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(_GOLDEN))


def draw_seqlens(seed, side, batch, lo, hi):
    """The lengths a `uniform:lo:hi` distribution of seqlens_q (side "q") or seqlens_kv ("kv")
    draws for `batch` sequences: lo + draw_b mod (hi − lo + 1)."""
    stream = _STREAM_SEQLENS_Q if side == "q" else _STREAM_SEQLENS_KV
    span = np.uint64(hi - lo + 1)
    return (np.int64(lo) + (_draws(seed, stream, batch) % span).astype(np.int64)).astype(np.int64)


def seqlens(seed, side, spec, batch=None):
    """Lengths of one side as a run resolves its parameter: a list (or a "128,512,77" string)
    as given, or a distribution ({"dist": "uniform", "min", "max"} or "uniform:MIN:MAX")
    drawn from seed for `batch` sequences."""
    if isinstance(spec, str):
        if spec.startswith("uniform:"):
            _, lo, hi = spec.split(":")
            spec = {"dist": "uniform", "min": int(lo), "max": int(hi)}
        else:
            spec = [int(x) for x in spec.split(",")]
    if isinstance(spec, dict):
        if spec.get("dist") != "uniform":
            raise ValueError(f"unknown distribution {spec!r}")
        return draw_seqlens(seed, side, batch, int(spec["min"]), int(spec["max"]))
    return np.asarray(spec, dtype=np.int64)


def num_pages_needed(seqlens_kv, page_size):
    """Pages the sequences fill: Σ ⌈Skv_b / page_size⌉."""
    return int(np.sum((np.asarray(seqlens_kv, dtype=np.int64) + page_size - 1) // page_size))


def num_pages_default(needed):
    """The cache a run gets unless num_pages is given: the pages needed and a quarter more (≥ 1)."""
    return max(1, min(MAX_TOKENS, needed + (needed + 3) // 4))


def page_order(seed, num_pages):
    """The pages 0 .. num_pages-1 sorted by their draw of the page stream, ties by page id."""
    d = _draws(seed, _STREAM_PAGES, num_pages)
    return np.lexsort((np.arange(num_pages), d)).astype(np.int32)


def serving_layout(seed, batch=None, seq_q=None, seq_kv=None, seqlens_q=None, seqlens_kv=None, page_size=0,
                   num_pages=None):
    """The layout a run with these parameters has, resolved as attnd resolves them: batch from a
    list, the bounds seq_q/seq_kv the longest sequence unless given, num_pages the default.
    Returns a dict: batch, seq_q, seq_kv, ragged (bool), seqlens_q, seqlens_kv (arrays of
    batch), cu_seqlens_q, cu_seqlens_kv (int32, batch + 1), and when paged page_size,
    num_pages, block_table (int32 [batch, ⌈seq_kv / page_size⌉])."""
    ragged = seqlens_q is not None or seqlens_kv is not None
    for spec in (seqlens_q, seqlens_kv):
        if batch is None and spec is not None and not isinstance(spec, dict) and not str(spec).startswith("uniform:"):
            batch = len(seqlens(seed, "q", spec))
    lay = {"batch": batch, "ragged": ragged}
    for side, spec, bound in (("q", seqlens_q, seq_q), ("kv", seqlens_kv, seq_kv)):
        if spec is None:
            if bound is None:
                raise ValueError(f"seq_{side} is needed for a side without lengths")
            lens = np.full(batch, bound, dtype=np.int64)
        else:
            lens = seqlens(seed, side, spec, batch)
            longest = int(lens.max()) if len(lens) else 0
            bound = max(longest, 1) if bound is None else bound
        lay["seq_" + side] = bound
        lay["seqlens_" + side] = lens
        lay["cu_seqlens_" + side] = np.concatenate([[0], np.cumsum(lens)]).astype(np.int32)
    if page_size:
        width = -(-lay["seq_kv"] // page_size)
        pages = (lay["seqlens_kv"] + page_size - 1) // page_size
        needed = int(pages.sum())
        n = num_pages_default(needed) if num_pages is None else num_pages
        order = page_order(seed, n)
        table = np.zeros((batch, width), dtype=np.int32)
        first = np.concatenate([[0], np.cumsum(pages)])
        for b in range(batch):
            table[b, : pages[b]] = order[first[b] : first[b + 1]]
        lay.update(page_size=page_size, num_pages=n, block_table=table)
    return lay


def _kv_rows(lay, b, hkv):
    """Sequence b's K/V rows: (its keys, Hkv) indices into the tensor's [slots, Hkv] rows."""
    skv = int(lay["seqlens_kv"][b])
    j = np.arange(skv)
    if lay.get("page_size"):
        ps = lay["page_size"]
        slot = lay["block_table"][b][j // ps].astype(np.int64) * ps + j % ps
    elif lay["ragged"]:
        slot = lay["cu_seqlens_kv"][b] + j
    else:
        return None  # dense [B, Hkv, Skv, D]: indexed directly
    return slot


def serving_inputs(seed, lay, heads, head_dim, dtype, kv_heads=None, head_dim_v=None):
    """q, k, v of a run as it stores them: q [total_q, H, D] when ragged, else [B, H, Sq, D];
    k [num_pages, page_size, Hkv, D] when paged, [total_kv, Hkv, D] when ragged, else
    [B, Hkv, Skv, D]; v likewise with Dv. A paged cache holds each token's element of its
    contiguous twin and the filler streams' elements everywhere else."""
    hkv = kv_heads or heads
    dv = head_dim_v or head_dim
    b, sq, skv = lay["batch"], lay["seq_q"], lay["seq_kv"]
    if lay["ragged"]:
        tq, tkv = int(lay["cu_seqlens_q"][-1]), int(lay["cu_seqlens_kv"][-1])
        q = generate(seed, "q", tq * heads * head_dim, dtype).reshape(tq, heads, head_dim)
        flat = [(generate(seed, t, tkv * hkv * d, dtype).reshape(tkv, hkv, d)) for t, d in (("k", head_dim), ("v", dv))]
    else:
        q = generate(seed, "q", b * heads * sq * head_dim, dtype).reshape(b, heads, sq, head_dim)
        flat = [(generate(seed, t, b * hkv * skv * d, dtype).reshape(b, hkv, skv, d)) for t, d in (("k", head_dim), ("v", dv))]
    if not lay.get("page_size"):
        return q, flat[0], flat[1]
    out = []
    n, ps = lay["num_pages"], lay["page_size"]
    for t, d, contiguous in ((_STREAM_K_FILL, head_dim, flat[0]), (_STREAM_V_FILL, dv, flat[1])):
        cache = generate(seed, t, n * ps * hkv * d, dtype).reshape(n * ps, hkv, d)
        for bi in range(b):
            slot = _kv_rows(lay, bi, hkv)
            if lay["ragged"]:
                c0 = int(lay["cu_seqlens_kv"][bi])
                cache[slot] = contiguous[c0 : c0 + len(slot)]
            else:
                cache[slot] = np.swapaxes(contiguous[bi][:, : len(slot)], 0, 1)
        out.append(cache.reshape(n, ps, hkv, d))
    return q, out[0], out[1]


def visible_range(mask, window, sq, skv):
    """Keys [lo_i, hi_i) each query row of a sequence sees: attn_visible_range_seq (common/attn.h);
    window is the run parameter (keys more than `window` before the row's position are hidden)."""
    rows = np.arange(sq, dtype=np.int64)
    hi = visible_keys(mask, sq, skv)
    pos = rows + (skv - sq if mask == "causal_bottom_right" else 0)
    lo = np.zeros(sq, dtype=np.int64) if window is None else pos - window
    lo = np.minimum(np.maximum(lo, 0), hi)
    return lo, hi


def serving_reference(q, k, v, lay, heads, mask="causal", scale=None, window=None, kv_heads=None, dtype=None):
    """The fp64 reference of a run over inputs laid out as serving_inputs makes them, written
    in the output's layout: [total_q, H, Dv] when ragged, else [B, H, Sq, Dv]. Each sequence
    with its own lengths, its mask and window; fully masked rows zeros."""
    hkv = kv_heads or heads
    group = heads // hkv
    q, k, v = to_float64(q, dtype), to_float64(k, dtype), to_float64(v, dtype)
    d, dv = q.shape[-1], v.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    if lay.get("page_size"):
        k, v = k.reshape(-1, hkv, d), v.reshape(-1, hkv, dv)
    tq = int(lay["cu_seqlens_q"][-1]) if lay["ragged"] else None
    out = np.zeros((tq, heads, dv) if lay["ragged"] else (lay["batch"], heads, lay["seq_q"], dv))
    for b in range(lay["batch"]):
        sq, skv = int(lay["seqlens_q"][b]), int(lay["seqlens_kv"][b])
        if lay["ragged"]:
            c0 = int(lay["cu_seqlens_q"][b])
            qb = np.swapaxes(q[c0 : c0 + sq], 0, 1)  # [H, sq, D]
        else:
            qb = q[b]
        slot = _kv_rows(lay, b, hkv)
        if slot is not None:
            kb, vb = np.swapaxes(k[slot], 0, 1), np.swapaxes(v[slot], 0, 1)  # [Hkv, skv, D]
        else:
            kb, vb = k[b], v[b]
        kb, vb = np.repeat(kb, group, axis=0), np.repeat(vb, group, axis=0)  # repeat_interleave
        lo, hi = visible_range(mask, window, sq, skv)
        cols = np.arange(skv)[None, :]
        allowed = (cols >= lo[:, None]) & (cols < hi[:, None])
        s = np.where(allowed, scale * (qb @ np.swapaxes(kb, -1, -2)), -np.inf)
        mx = np.max(s, axis=-1, keepdims=True) if skv else np.zeros(s.shape[:-1] + (1,))
        mx = np.where(np.isfinite(mx), mx, 0.0)
        p = np.where(allowed, np.exp(s - mx), 0.0)
        tot = np.sum(p, axis=-1, keepdims=True)
        ob = np.where(tot > 0, (p @ vb) / np.where(tot > 0, tot, 1.0), 0.0)  # [H, sq, Dv]
        if lay["ragged"]:
            out[c0 : c0 + sq] = np.swapaxes(ob, 0, 1)
        else:
            out[b] = ob
    return out
