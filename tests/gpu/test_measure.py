"""Timing on the GPU (stopping rule, cold cache, CUDA graphs, host overhead), end-to-end
latency, and the worker surviving a sticky CUDA error and an impossible shape."""
import time

import pytest

from attnd_gpu_helpers import STUDY, error_of, fact, fresh_seed, need_variant

STOP_REASONS = ("iters", "rse", "max_iters", "max_time", "max_time_before_min_iters")


def check_timing(t):
    assert t["stop_reason"] in STOP_REASONS, t
    assert t["iters"] >= 1
    assert 0 < t["min_us"] <= t["median_us"] <= t["max_us"], t
    assert t["min_us"] <= t["p10_us"] <= t["median_us"] <= t["p90_us"] <= t["max_us"], t
    assert t["min_us"] <= t["mean_us"] <= t["max_us"], t
    assert t["total_ms"] > 0
    c = t["clocks"]
    for key in ("sm_min_mhz", "sm_max_mhz", "sm_limit_mhz", "throttled"):
        assert key in c, c
    assert isinstance(c["throttled"], bool)


@pytest.mark.parametrize("variant", ["naive", "naive_inplace", "math"])
def test_default_stopping_rule(gapi, variants, variant):
    need_variant(variants, variant)
    rec = gapi.run_ok(backend=variant, seed=fresh_seed(), **STUDY)
    t = rec["timing"]
    check_timing(t)
    assert t["stop_reason"] != "iters", "no iters given: the stopping rule decides"
    assert t["cache"] == "hot" and t["graph"] is False
    assert rec["perf"]["tflops"] > 0
    fact("%s study median_us" % variant, t["median_us"])
    fact("%s study stop" % variant, "%s after %d iters, rse %.4f" % (t["stop_reason"], t["iters"], t["rse"]))
    fact("%s study clocks" % variant, t["clocks"])


@pytest.mark.xfail(reason="target not met on the lent H200 VM: 7 eager API calls at ~5 us each "
                          "(bench/results/nvidia-h200/2026-12-02-a2d5da5-host-cost.md); "
                          "graph mode meets it", strict=False)
@pytest.mark.parametrize("variant", ["naive", "naive_inplace"])
def test_host_overhead(gapi, variants, variant):
    """CPU time to enqueue one eager forward: the issue's target is <= 20 us (PyTorch:
    ~90-240 us on the same card)."""
    need_variant(variants, variant)
    rec = gapi.run_ok(backend=variant, seed=fresh_seed(), iters=30, warmup=5, **STUDY)
    host = rec["timing"]["host_us"]
    fact("%s study host_us" % variant, host)
    assert 0 < host <= 20.0, "host_us %.1f" % host


@pytest.mark.parametrize("variant", ["naive", "naive_inplace"])
def test_host_overhead_graph(gapi, variants, variant):
    """With graph=true one forward is one cudaGraphLaunch: <= 20 us on any host."""
    need_variant(variants, variant)
    rec = gapi.run_ok(backend=variant, seed=fresh_seed(), iters=30, warmup=5, graph="true", **STUDY)
    host = rec["timing"]["host_us"]
    fact("%s study graph host_us (host test)" % variant, host)
    assert 0 < host <= 20.0, "host_us %.1f" % host


@pytest.mark.parametrize("variant", ["naive", "math"])
def test_cold_cache(gapi, variants, variant):
    need_variant(variants, variant)
    hot = gapi.run_ok(backend=variant, seed=fresh_seed(), iters=10, **STUDY)["timing"]
    cold = gapi.run_ok(backend=variant, seed=fresh_seed(), iters=10, cache="cold", **STUDY)["timing"]
    check_timing(cold)
    assert cold["cache"] == "cold"
    fact("%s study cold/hot median" % variant, cold["median_us"] / hot["median_us"])


@pytest.mark.parametrize("variant", ["naive", "naive_inplace", "math"])
def test_graph_replays(gapi, variants, variant):
    need_variant(variants, variant)
    rec = gapi.run_ok(backend=variant, seed=fresh_seed(), iters=10, graph="true", verify="true", **STUDY)
    t = rec["timing"]
    check_timing(t)
    assert t["graph"] is True
    assert rec["output"]["nan"] == 0 and rec["verify"]["pass"] is True
    fact("%s study graph host_us" % variant, t["host_us"])


def test_graph_and_cold_together(gapi, variants):
    need_variant(variants, "naive")
    t = gapi.run_ok(backend="naive", seed=fresh_seed(), iters=5, graph="true", cache="cold", **STUDY)["timing"]
    check_timing(t)
    assert t["graph"] is True and t["cache"] == "cold"


def test_one_iteration_latency_under_50ms(gapi, variants):
    need_variant(variants, "naive")
    params = dict(backend="naive", device="cuda:0", batch=1, heads=1, seq=1, head_dim=8, warmup=0, iters=1,
                  profile="false")
    gapi.run_ok(**params)
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        r = gapi.run(params=params)
        times.append((time.perf_counter() - t0) * 1e3)
        assert r.status_code == 200, r.text[:500]
    fact("1-iteration run on cuda:0, ms (best, median of 5)", [round(min(times), 2), round(sorted(times)[2], 2)])
    assert min(times) < 50.0, times


def test_sticky_error_restarts_worker(gapi, variants):
    need_variant(variants, "naive")
    t0 = time.monotonic()
    r = gapi.run(params=dict(backend="naive", device="cuda:0", batch=1, heads=1, seq=8, head_dim=8, iters=1,
                             fault="sticky"))
    assert r.status_code == 500, r.text[:1000]
    rec = r.json()
    assert rec["status"] == "failed" and rec["error"]["code"] and rec["error"]["message"], rec
    fact("sticky error message", rec["error"]["message"][:200])
    ok = gapi.run_ok(backend="naive", batch=2, heads=3, seq=64, head_dim=64, iters=2, verify="true",
                     seed=fresh_seed())
    assert ok["verify"]["pass"] is True
    fact("sticky fault → next run done, s", round(time.monotonic() - t0, 2))


def test_shape_too_large_for_memory(gapi, variants):
    """Within the parse bounds (2^38 score elements) but 512 GiB of scores: 413 before
    anything is allocated; the worker keeps running."""
    need_variant(variants, "naive")
    r = gapi.run(params=dict(backend="naive", device="cuda:0", batch=256, heads=64, seq=4096, head_dim=128, iters=1))
    assert r.status_code == 413, r.text[:500]
    error_of(r)
    # Past RUN_MAX_ELEMS (2^44 score elements): refused as well, 400 or 413.
    r = gapi.run(params=dict(backend="naive", device="cuda:0", batch=4096, heads=64, seq=8192, head_dim=128, iters=1))
    assert r.status_code in (400, 413), r.text[:500]
    assert gapi.get("/healthz").status_code == 200
    gapi.run_ok(backend="naive", batch=1, heads=2, seq=32, head_dim=64, iters=1, seed=fresh_seed())


def test_device_object(gapi):
    devs = {d["id"]: d for d in gapi.get("/v1/device").json()["devices"]}
    d = devs["cuda:0"]
    for key in ("name", "compute_capability", "sms", "memory_total_bytes"):
        assert key in d, d
    fact("device", {k: d.get(k) for k in ("name", "compute_capability", "sms", "driver", "cuda_runtime", "cublas")})


def test_energy_roofline_and_clock_reasons(gapi, variants):
    """A window long enough for NVML's energy counter: joules per forward, average power and
    TFLOP/J are there and plausible; the roofline puts the kernel under the peak; the clocks
    carry power and the event reasons."""
    need_variant(variants, "flash")
    rec = gapi.run_ok(backend="flash", seed=fresh_seed(), min_time_ms=500, max_time_ms=2000, min_iters=10,
                      max_iters=100000, target_noise=0.001, **STUDY)
    t, perf, en = rec["timing"], rec["perf"], rec["energy"]
    check_timing(t)
    assert en["why"] is None, en
    assert en["window_ms"] >= 100 and en["forwards"] == t["iters"]
    assert 30 <= en["avg_power_w"] <= 1500, en          # a board under load, not 0 or absurd
    # a cold board at its cap draws over it for its first half second: the reading stands, and
    # the instantaneous reads that were taken meanwhile say so
    assert en["instant_power_max_w"] and en["instant_power_max_w"] >= en["instant_power_min_w"] > 0, en
    assert en["joules_per_forward"] > 0 and en["tflop_per_joule"] > 0
    assert en["tflop_per_joule"] == pytest.approx(perf["flops"] / en["joules_per_forward"] / 1e12, rel=1e-6)
    assert perf["peak_tflops"] > 0 and "FLOP/clock/SM" in perf["peak_tflops_basis"], perf
    assert perf["peak_gbps"] > 0, perf
    assert 0 < perf["fraction_of_peak"]["compute"] < 1 and perf["suspect"] is False, perf
    c = t["clocks"]
    assert c["power_max_w"] > 0 and isinstance(c["event_reasons"], list), c
    from attnd_api_helpers import check_against_openapi

    check_against_openapi(rec, "Run")  # a GPU record: every field typed in docs/openapi.json
    fact("flash study energy", en)
    fact("flash study roofline", {k: perf[k] for k in ("tflops", "peak_tflops", "peak_tflops_basis", "peak_gbps",
                                                       "fraction_of_peak")})
    fact("flash study clock reasons", c["event_reasons"])


def test_energy_needs_a_long_enough_window(gapi, variants):
    need_variant(variants, "flash")
    gapi.run_ok(backend="flash", seed=fresh_seed(), iters=1, warmup=1, **STUDY)  # loads the module: a warm-up
    rec = gapi.run_ok(backend="flash", seed=fresh_seed(), iters=3, warmup=1, **STUDY)  # at its pace after that
    en = rec["energy"]
    assert en["joules_per_forward"] is None and "min_time_ms" in en["why"], en
    # a window this short never starts the sampler, and says so by its iters
    assert "iters=3" in en["why"], en


def test_worker_phases_split_the_measuring(gapi, variants):
    """A GPU run's service.worker_ms gives its measuring in four phases, not one, and they sum
    with the rest to the total."""
    need_variant(variants, "flash")
    rec = gapi.run_ok(backend="flash", seed=fresh_seed(), iters=10, **STUDY)
    w = rec["service"]["worker_ms"]
    assert {"measure_setup", "warmup", "timed", "measure_end"} <= set(w) and "measure" not in w, w
    assert sum(v for k, v in w.items() if k != "total") == pytest.approx(w["total"], rel=1e-6, abs=1e-6), w
    fact("flash small run worker_ms", w)


def test_cudnn_fraction_of_peak_is_plausible(gapi, variants):
    """cuDNN's fused SDPA at B2 H16 S8192 D128 causal runs near 0.6 of the dense bf16 peak on
    Hopper (NVIDIA's published 644 TFLOP/s against ~1070 at 1980 MHz)."""
    need_variant(variants, "cudnn")
    rec = gapi.run_ok(backend="cudnn", seed=fresh_seed(), batch=2, heads=16, seq=8192, head_dim=128, dtype="bf16",
                      mask="causal", min_time_ms=200)
    frac = rec["perf"]["fraction_of_peak"]["compute"]
    fact("cudnn B2 H16 S8192 D128 causal fraction_of_peak", frac)
    fact("cudnn B2 H16 S8192 D128 causal energy", rec["energy"])
    assert 0.4 <= frac <= 0.85, rec["perf"]
