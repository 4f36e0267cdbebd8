"""The `impl` run parameter on a GPU: each of flash's and efficient's kernel families, asked for
by name, verifies against the reference, runs the kernel it names (the profiled forward's
kernel table) and reports it as `impl_used`, fallbacks included (wgmma at head_dim 96 runs w4,
w4 at 64 and 256 runs legacy; tma runs every head dim cuDNN runs, DeepSeek-V3's 192/128 too). An implementation the device cannot run (tma and wgmma need compute
capability 9.0 and sm_90a code) is refused 422 before it queues."""
import pytest

from attnd_gpu_helpers import error_of, fact, fresh_seed, need_variant
from test_variants import check_verified

# The __global__ function each family launches (kernels/flash_*.cuh).
KERNEL = {"tma": "flash_tma_kernel", "wgmma": "flash_wg_kernel", "w4": "flash_exact_kernel",
          "w8": "flash_exact_kernel", "legacy": "flash_fwd_kernel", "exact": "flash_exact_kernel"}
# flash: what runs for (impl asked for, head_dim) — kernels/flash.cu's flash_impl_used.
FLASH_RUNS = {("tma", 64): "tma", ("tma", 96): "tma", ("tma", 128): "tma", ("tma", 256): "tma",
              ("wgmma", 64): "wgmma", ("wgmma", 96): "w4", ("wgmma", 128): "wgmma", ("wgmma", 256): "legacy",
              ("w4", 64): "legacy", ("w4", 96): "w4", ("w4", 128): "w4", ("w4", 256): "legacy",
              ("legacy", 64): "legacy", ("legacy", 96): "legacy", ("legacy", 128): "legacy",
              ("legacy", 256): "legacy"}
SHAPE = dict(batch=2, heads=4, seq_q=384, seq_kv=384)


def runs_here(v, impl):
    """Whether cuda:0's worker said in its hello that it runs impl (GET /v1/variants)."""
    entry = next((i for i in v["impls"] if i["name"] == impl), None)
    assert entry is not None, "%s lists no implementation %s: %r" % (v["name"], impl, v["impls"])
    return "cuda:0" in entry["devices"]


def kernel_names(rec):
    assert rec["kernels"] is not None, "profile=true gave no kernel table"
    return [r["name"] for r in rec["kernels"]["table"] if r["kind"] == "kernel"]


@pytest.mark.parametrize("head_dim", [64, 96, 128, 256])
@pytest.mark.parametrize("impl", ["tma", "wgmma", "w4", "legacy"])
def test_flash_impl_runs_what_it_names(gapi, variants, impl, head_dim):
    v = need_variant(variants, "flash")
    params = dict(SHAPE, backend="flash", impl=impl, head_dim=head_dim, dtype="bf16", mask="causal",
                  seed=fresh_seed(), warmup=1, iters=3, verify="true", profile="true", device="cuda:0")
    if not runs_here(v, impl):
        r = gapi.run(params=params)
        assert r.status_code == 422, r.text
        err = error_of(r)
        assert err["code"] == "unsupported" and err["field"] == "impl", err
        pytest.skip("cuda:0 does not run flash %s: %s" % (impl, err["message"]))
    rec = gapi.run_ok(**params)
    check_verified(rec, dict(SHAPE, head_dim=head_dim), "bf16")
    assert rec["params"]["impl"] == impl
    ran = FLASH_RUNS[(impl, head_dim)]
    assert rec["impl_used"] == ran, rec.get("impl_used")
    names = kernel_names(rec)
    assert len(names) == 1 and KERNEL[ran] in names[0], (ran, names)
    fact("flash impl=%s D%d median_us" % (impl, head_dim), rec["timing"]["median_us"])


@pytest.mark.parametrize("impl,ran", [(None, "tma"), ("tma", "tma"), ("wgmma", "legacy"), ("legacy", "legacy")])
def test_flash_impl_deepseek_head_dims(gapi, variants, impl, ran):
    """head_dim 192 with head_dim_v 128 (DeepSeek-V3's prefill): v6 where it runs (the default on
    sm_90a), else v3's bucket."""
    v = need_variant(variants, "flash")
    params = dict(SHAPE, backend="flash", head_dim=192, head_dim_v=128, dtype="bf16", mask="causal",
                  seed=fresh_seed(), warmup=1, iters=3, verify="true", profile="true", device="cuda:0")
    if impl:
        params["impl"] = impl
    if not runs_here(v, "tma"):  # no sm_90a here: v3 by default, the Hopper families refused
        if impl in ("tma", "wgmma"):
            r = gapi.run(params=params)
            assert r.status_code == 422 and error_of(r)["field"] == "impl", r.text
            pytest.skip("cuda:0 does not run flash %s" % impl)
        ran = "legacy"
    rec = gapi.run_ok(**params)
    check_verified(rec, dict(SHAPE, head_dim=192, head_dim_v=128), "bf16")  # O's rows have head_dim_v
    assert rec["impl_used"] == ran, rec.get("impl_used")
    names = kernel_names(rec)
    assert len(names) == 1 and KERNEL[ran] in names[0], (ran, names)
    fact("flash impl=%s D192/128 median_us" % impl, rec["timing"]["median_us"])


def test_flash_default_is_recorded_as_default(gapi, variants):
    """No impl: params has none, and impl_used says what the default was (tma on sm_90a)."""
    v = need_variant(variants, "flash")
    rec = gapi.run_ok(backend="flash", head_dim=128, seed=fresh_seed(), iters=2, **SHAPE)
    assert "impl" not in rec["params"], rec["params"]
    want = "tma" if runs_here(v, "tma") else None
    assert rec["impl_used"] in {"tma", "w4", "w8"}, rec.get("impl_used")
    if want:
        assert rec["impl_used"] == want
    # The choice does not outlive its run: the next default run runs the default again.
    forced = gapi.run_ok(backend="flash", impl="legacy", head_dim=128, seed=fresh_seed(), iters=2, **SHAPE)
    assert forced["impl_used"] == "legacy"
    again = gapi.run_ok(backend="flash", head_dim=128, seed=fresh_seed(), iters=2, **SHAPE)
    assert again["impl_used"] == rec["impl_used"]


@pytest.mark.parametrize("dtype,head_dim,impl,ran", [
    ("bf16", 128, "legacy", "legacy"), ("fp16", 128, "legacy", "legacy"), ("bf16", 128, "exact", "exact"),
    ("bf16", 128, None, "exact"), ("bf16", 64, "exact", "legacy"), ("fp32", 128, None, "legacy"),
])
def test_efficient_impl(gapi, variants, dtype, head_dim, impl, ran):
    v = need_variant(variants, "efficient")
    assert runs_here(v, "legacy") and runs_here(v, "exact"), v["impls"]
    params = dict(SHAPE, backend="efficient", head_dim=head_dim, dtype=dtype, mask="causal", seed=fresh_seed(),
                  warmup=1, iters=3, verify="true", profile="true")
    if impl:
        params["impl"] = impl
    rec = gapi.run_ok(**params)
    check_verified(rec, dict(SHAPE, head_dim=head_dim), dtype)
    assert rec["params"].get("impl") == impl
    assert rec["impl_used"] == ran, rec.get("impl_used")
    if dtype != "fp32":  # the fp32 kernel is efficient's own (efficient_f32_kernel)
        names = kernel_names(rec)
        assert len(names) == 1 and KERNEL[ran] in names[0], (ran, names)


def test_other_backends_report_no_impl(gapi, variants):
    need_variant(variants, "math")
    rec = gapi.run_ok(backend="math", seed=fresh_seed(), iters=2, head_dim=64, **SHAPE)
    assert "impl_used" not in rec and "impl" not in rec["params"]
