#!/usr/bin/env python3
"""The PyTorch peer: the study's six attention variants in PyTorch eager, timed the way
peers-h200.md was measured, on the shapes of bench/shapes.json. One JSON line per (shape,
variant) on stdout or --out.

    naive          q@kᵀ, *scale, masked_fill (out of place), softmax, @v
    naive_inplace  the same with masked_fill_ (in place)
    math, efficient, flash, cudnn
                   F.scaled_dot_product_attention under sdpa_kernel(SDPBackend.…)

gpu_us: median of CUDA-event times of single forwards (after warm-ups, inputs hot).
host_us: median CPU time of the Python call that enqueues one forward (the GPU is idle when
it starts: a synchronize precedes each timed call, outside the timing).
ops: kernels + memcpy + memset of one forward, from torch.profiler.

--decode B,H,Hkv,SQ,SKV,D[,MASK] (repeatable) runs these shapes instead of shapes.json: the
serving decode as PyTorch users run it, SDPA with enable_gqa over K/V of Hkv heads
[B,Hkv,SKV,D], MASK none or causal_bottom_right (torch's causal_lower_right bias), the
variants flash, efficient and cudnn (default). Each is timed sustained, as attnd's stopping
rule does: forwards enqueued back to back in batches, an event pair around each, until their
times add up to --min-time-ms, the median of them; its row adds tbs (Q, K, V and O moved once,
over the median).
"""
import argparse
import json
import math
import statistics
import sys
import time


def flops(b, h, s, d, mask):
    f = 4.0 * b * h * s * s * d
    return f / 2 if mask == "causal" else f


def sdpa_backends():
    """SDPA's backends under the names attnd's variants give them."""
    from torch.nn.attention import SDPBackend
    return {"math": SDPBackend.MATH, "efficient": SDPBackend.EFFICIENT_ATTENTION,
            "flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def make_variants(torch, F):
    from torch.nn.attention import sdpa_kernel

    def naive(q, k, v, mask, scale):
        s = q @ k.transpose(-2, -1)
        s = s * scale
        if mask is not None:
            s = s.masked_fill(mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        return p @ v

    def naive_inplace(q, k, v, mask, scale):
        s = q @ k.transpose(-2, -1)
        s = s * scale
        if mask is not None:
            s.masked_fill_(mask, float("-inf"))
        p = torch.softmax(s, dim=-1)
        return p @ v

    def sdpa(backend):
        def fn(q, k, v, mask, scale):
            return F.scaled_dot_product_attention(q, k, v, is_causal=mask is not None, scale=scale)
        fn.context = lambda: sdpa_kernel(backend)
        return fn

    table = {"naive": naive, "naive_inplace": naive_inplace}
    table.update((name, sdpa(backend)) for name, backend in sdpa_backends().items())
    return table


def parse_decode(text):
    """B,H,Hkv,SQ,SKV,D[,MASK] → a decode shape's dict."""
    parts = text.split(",")
    if not 6 <= len(parts) <= 7:
        raise argparse.ArgumentTypeError("decode shape %r: B,H,Hkv,SQ,SKV,D[,MASK]" % text)
    b, h, hkv, sq, skv, d = (int(x) for x in parts[:6])
    mask = parts[6] if len(parts) > 6 else "none"
    if mask not in ("none", "causal_bottom_right") or min(b, h, hkv, sq, skv, d) < 1 or h % hkv:
        raise argparse.ArgumentTypeError("decode shape %r: heads a multiple of Hkv, MASK none or "
                                         "causal_bottom_right" % text)
    return dict(batch=b, heads=h, kv_heads=hkv, seq_q=sq, seq_kv=skv, head_dim=d, mask=mask)


def measure_decode(torch, F, backend, shape, warmup, min_time_ms):
    """One decode shape under one SDPA backend: (event times of single forwards, sustained,
    kernel names, memop names)."""
    from torch.nn.attention import sdpa_kernel
    from torch.nn.attention.bias import causal_lower_right
    b, h, hkv, sq, skv, d = (shape[k] for k in ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim"))
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(1234)
    q = torch.randn(b, h, sq, d, dtype=torch.bfloat16, device=dev, generator=gen)
    k, v = (torch.randn(b, hkv, skv, d, dtype=torch.bfloat16, device=dev, generator=gen) for _ in range(2))
    bias = causal_lower_right(sq, skv) if shape["mask"] == "causal_bottom_right" else None

    def call():
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, enable_gqa=hkv != h)

    with sdpa_kernel(backend):
        for _ in range(warmup):
            call()
        torch.cuda.synchronize()
        # Batches of forwards enqueued back to back, an event pair around each, one wait a batch
        # (as attnd's timed loop does): the GPU never idles between forwards while Python
        # dispatches the next, so host time stays out of the figure.
        gpu, batch = [], 8
        while sum(gpu) < min_time_ms * 1e3 or len(gpu) < 10:
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(batch)]
            for start, end in events:
                start.record()
                call()
                end.record()
            events[-1][1].synchronize()
            times = [start.elapsed_time(end) * 1e3 for start, end in events]
            gpu.extend(times)
            batch = max(8, min(1000, int(50e3 / max(statistics.median(times), 1.0))))  # about 50 ms a batch
        kernels, memcpy, memset = count_ops(torch, call)
    return gpu, kernels, memcpy + memset


def run_decode(torch, F, shapes, variants, warmup, min_time_ms, meta, out):
    """--decode: one JSON line per (shape, variant)."""
    backends = sdpa_backends()
    for shape in shapes:
        b, h, hkv, sq, skv, d = (shape[k] for k in ("batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim"))
        nbytes = 2 * (2 * b * h * sq * d + 2 * b * hkv * skv * d)   # bf16 Q, O, K, V once
        for name in variants:
            row = dict(meta, variant=name, **shape)
            try:
                if name not in backends:
                    raise ValueError("unknown decode variant %s (flash, efficient, cudnn, math)" % name)
                gpu, kern, memops = measure_decode(torch, F, backends[name], shape, warmup, min_time_ms)
                med = statistics.median(gpu)
                row.update(gpu_us=med, gpu_us_min=min(gpu), iters=len(gpu), kernels=len(kern), memops=len(memops),
                           op_names=kern + memops, tbs=nbytes / (med * 1e-6) / 1e12, error=None)
            except Exception as exc:  # a backend that refuses the shape does not stop the rest
                row.update(error="%s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:300] if str(exc) else ""))
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            out.write(json.dumps(row) + "\n")
            out.flush()


def count_ops(torch, call):
    """Kernels, memcpys and memsets one call launched, by torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    names = []
    try:
        from torch.autograd import DeviceType
        names = [e.name for e in prof.events() if e.device_type == DeviceType.CUDA]
    except Exception:  # older/newer profiler APIs: fall back to the raw kineto events
        names = []
    if not names:
        try:
            names = [e.name() for e in prof.profiler.kineto_results.events()
                     if str(e.device_type()).endswith("CUDA")]
        except Exception:
            names = []
    memcpy = [n for n in names if n.lower().startswith("memcpy")]
    memset = [n for n in names if n.lower().startswith("memset")]
    kernels = [n for n in names if n not in memcpy and n not in memset]
    return kernels, memcpy, memset


def measure(torch, fn, q, k, v, mask, scale, warmup, iters):
    def call():
        return fn(q, k, v, mask, scale)

    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    gpu = []
    for _ in range(iters):
        start.record()
        call()
        end.record()
        end.synchronize()
        gpu.append(start.elapsed_time(end) * 1e3)
    host = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        call()
        host.append((time.perf_counter() - t0) * 1e6)
    torch.cuda.synchronize()
    kernels, memcpy, memset = count_ops(torch, call)
    return gpu, host, kernels, memcpy, memset


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="bench/shapes.json")
    ap.add_argument("--variants", default="", help="comma-separated; default: all of shapes.json")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--iters", type=int, default=None)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--out", default="-")
    ap.add_argument("--decode", action="append", type=parse_decode, default=[],
                    help="B,H,Hkv,SQ,SKV,D[,MASK]: a decode shape instead of shapes.json (repeatable)")
    ap.add_argument("--min-time-ms", type=float, default=300, help="--decode: sustained time per variant")
    args = ap.parse_args()

    with open(args.shapes) as f:
        cfg = json.load(f)
    variants = [x for x in args.variants.split(",") if x] or cfg["variants"]
    warmup = args.warmup if args.warmup is not None else cfg["peer"]["warmup"]
    iters = max(30, args.iters if args.iters is not None else cfg["peer"]["iters"])
    out = sys.stdout if args.out == "-" else open(args.out, "w")

    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = False   # PyTorch's default; stated, not assumed
    dev = torch.device(args.device)
    torch.cuda.set_device(dev)
    gpu_name = torch.cuda.get_device_name(dev)
    meta = {"impl": "torch", "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "gpu": gpu_name}
    if args.decode:
        run_decode(torch, F, args.decode, [x for x in args.variants.split(",") if x] or ["flash", "efficient", "cudnn"],
                   args.warmup if args.warmup is not None else 5, args.min_time_ms, meta, out)
        if out is not sys.stdout:
            out.close()
        return
    table = make_variants(torch, F)

    for shape in cfg["shapes"]:
        b, h, s, d, mask_name = shape["batch"], shape["heads"], shape["seq"], shape["head_dim"], shape["mask"]
        gen = torch.Generator(device=dev).manual_seed(1234)
        q, k, v = (torch.randn(b, h, s, d, dtype=torch.bfloat16, device=dev, generator=gen) for _ in range(3))
        mask = torch.ones(s, s, dtype=torch.bool, device=dev).triu(1) if mask_name == "causal" else None
        scale = 1.0 / math.sqrt(d)
        for name in variants:
            row = dict(meta, variant=name, **shape)
            fn = table.get(name)
            try:
                if fn is None:
                    raise ValueError("unknown variant %s" % name)
                ctx = getattr(fn, "context", None)
                if ctx is not None:
                    with ctx():
                        gpu, host, kern, mcpy, mset = measure(torch, fn, q, k, v, mask, scale, warmup, iters)
                else:
                    gpu, host, kern, mcpy, mset = measure(torch, fn, q, k, v, mask, scale, warmup, iters)
                med = statistics.median(gpu)
                row.update(gpu_us=med, gpu_us_min=min(gpu), host_us=statistics.median(host), iters=iters,
                           warmup=warmup, kernels=len(kern), memops=len(mcpy) + len(mset),
                           ops=len(kern) + len(mcpy) + len(mset), op_names=kern + mcpy + mset,
                           tflops=flops(b, h, s, d, mask_name) / med / 1e6, error=None)
            except Exception as exc:  # one variant that cannot run this shape does not stop the rest
                row.update(error="%s: %s" % (type(exc).__name__, str(exc).splitlines()[0][:300] if str(exc) else ""))
                torch.cuda.synchronize()
            out.write(json.dumps(row) + "\n")
            out.flush()
        del q, k, v, mask
        torch.cuda.empty_cache()
    if out is not sys.stdout:
        out.close()


if __name__ == "__main__":
    main()
