"""Fixtures of the GPU tests (a machine with a CUDA GPU).

    ATTND_URL   a running attnd to test (tests/gpu/run.sh starts one and exports it);
                unset: start one here (ATTND_BIN, --devices all, fault injection on).
    ATTND_PID   the pid of that attnd's front process (run.sh and scripts/gpu-quick.sh
                export it with ATTND_URL): tests that watch the front's memory read it;
                unset with ATTND_URL set, they say so and leave that check out.
    ATTND_REQUIRE_GPU=1  fail (rather than skip) when the server has no cuda:0 (run.sh
                sets it when nvidia-smi lists a GPU).
    OUT         when set, facts worth reading (host_us, latency, kernel counts, errors)
                are written to $OUT/gpu-facts.json at the end, for run.sh's summary.

Test modules import the helpers below as `attnd_gpu_helpers` (pytest imports every
conftest.py as "conftest"). The server machinery is tests/api/conftest.py's.
"""
import contextlib
import importlib.util
import json
import os
import random
import sys
import time

import pytest
import requests

sys.modules.setdefault("attnd_gpu_helpers", sys.modules[__name__])

if "attnd_api_helpers" not in sys.modules:
    _path = os.path.join(os.path.dirname(__file__), "..", "api", "conftest.py")
    _spec = importlib.util.spec_from_file_location("attnd_api_helpers", _path)
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["attnd_api_helpers"] = _mod
    _spec.loader.exec_module(_mod)
from attnd_api_helpers import Api, AttndServer, error_of  # noqa: E402

GPU_RUN_TIMEOUT_S = 180.0
# The server's verify_cpu_max_macs (run.sh leaves the default): above it, verify uses the GPU
# fp32 math reference.
VERIFY_CPU_MAX_MACS = int(os.environ.get("ATTND_VERIFY_CPU_MAX_MACS", "1000000000"))
GPU_VARIANTS = ["naive", "naive_inplace", "math"]
STUDY = dict(batch=8, heads=16, seq=1024, head_dim=64, dtype="bf16", mask="causal")

_rng = random.SystemRandom()
_facts = {}
_started_pid = None  # the front's pid when gpu_server started the server itself


def fresh_seed():
    """A seed never used before in this pytest run (53 random bits: a JSON number carries them
    exactly, and the server refuses larger ones given as numbers)."""
    return _rng.randrange(2 ** 53)


def fact(key, value):
    """Record a number worth reading in the summary (and print it: -s / -rA show it)."""
    _facts[key] = value
    print("FACT %s = %r" % (key, value))


class GpuApi(Api):
    def run(self, params=None, body=None, path="/v1/runs", timeout=GPU_RUN_TIMEOUT_S):
        return super().run(params=params, body=body, path=path, timeout=timeout)

    def run_ok(self, **params):
        params.setdefault("device", "cuda:0")
        return super().run_ok(**params)


@pytest.fixture(scope="session")
def gpu_server():
    global _started_pid
    url = os.environ.get("ATTND_URL")
    if url:
        url = url.rstrip("/")
        deadline = time.monotonic() + 60
        while True:
            try:
                r = requests.get(url + "/readyz", timeout=5)
                if r.status_code == 200 and r.json().get("ready") is True:
                    break
            except (requests.RequestException, ValueError):
                pass
            if time.monotonic() > deadline:
                pytest.fail("ATTND_URL=%s is not ready" % url, pytrace=False)
            time.sleep(0.2)
        yield url
        return
    srv = AttndServer(devices="all", extra=["--enable-fault-injection", "true", "--job-timeout-s", "60"]).start()
    _started_pid = srv.proc.pid
    try:
        yield srv.url
        srv.stop_checked()
    finally:
        srv.cleanup()


@pytest.fixture(scope="session")
def front_pid(gpu_server):
    """The pid of the server's front (the HTTP process; its workers are child processes):
    ATTND_PID, or the server gpu_server started; None when ATTND_URL came without ATTND_PID."""
    if os.environ.get("ATTND_URL"):
        pid = os.environ.get("ATTND_PID")
        if not pid:
            return None
        if not os.path.exists("/proc/%s/status" % pid):
            pytest.fail("ATTND_PID=%s is not a running process on this machine" % pid, pytrace=False)
        return int(pid)
    return _started_pid


@pytest.fixture(scope="session")
def gapi(gpu_server):
    api = GpuApi(gpu_server)
    devs = api.get("/v1/device").json()["devices"]
    if not any(d.get("id") == "cuda:0" for d in devs):
        if os.environ.get("ATTND_REQUIRE_GPU") == "1":
            pytest.fail("ATTND_REQUIRE_GPU=1 but the server has no cuda:0 (devices: %s)"
                        % [d.get("id") for d in devs], pytrace=False)
        pytest.skip("the server has no cuda:0 (devices: %s)" % [d.get("id") for d in devs])
    return api


@pytest.fixture(scope="session")
def variants(gapi):
    vs = gapi.get("/v1/variants").json()["variants"]
    return {v["name"]: v for v in vs}


def need_variant(variants, name):
    v = variants.get(name)
    assert v is not None, "variant %s missing from /v1/variants" % name
    if not v["available"]:
        pytest.skip("%s not available: %s" % (name, v["why"]))
    return v


def macs(batch, heads, seq_q, seq_kv, head_dim):
    return batch * heads * seq_q * seq_kv * head_dim


@pytest.fixture(scope="session", autouse=True)
def _write_facts():
    yield
    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, "gpu-facts.json"), "w") as f:
            json.dump(_facts, f, indent=1, sort_keys=True)


__all__ = ["Api", "GpuApi", "error_of", "fresh_seed", "fact", "need_variant", "macs", "GPU_VARIANTS", "STUDY",
           "VERIFY_CPU_MAX_MACS"]


# ---- servers offering pending features, and runs posted as JSON bodies (the serving modules)

def pending_server(extra=()):
    """attnd on every device with the pending features offered: (server, api), or a skip where
    it has no cuda:0 (a failure with ATTND_REQUIRE_GPU=1)."""
    srv = AttndServer(devices="all", extra=["--pending-features", "true", "--job-timeout-s", "120"] + list(extra))
    try:
        srv.start()
    except Exception as exc:  # a machine without the binary or without CUDA
        srv.cleanup()
        if os.environ.get("ATTND_REQUIRE_GPU") == "1":
            pytest.fail("cannot start attnd with --pending-features true: %s" % exc, pytrace=False)
        pytest.skip("cannot start attnd with --pending-features true: %s" % exc)
    api = Api(srv.url)
    devs = [d.get("id") for d in api.get("/v1/device").json()["devices"]]
    if "cuda:0" not in devs:
        srv.stop()
        srv.cleanup()
        if os.environ.get("ATTND_REQUIRE_GPU") == "1":
            pytest.fail("ATTND_REQUIRE_GPU=1 but the server has no cuda:0 (%s)" % devs, pytrace=False)
        pytest.skip("the server has no cuda:0 (devices: %s)" % devs)
    return srv, api


@contextlib.contextmanager
def server_offering(offers):
    """The pytest run's server (ATTND_URL) where offers(api) holds (scripts/gpu-session.sh's pending
    phase starts it with the pending features), else a pending_server of the caller's own,
    stopped on leaving."""
    url = os.environ.get("ATTND_URL")
    if url:
        try:
            if offers(Api(url.rstrip("/"))):
                yield Api(url.rstrip("/"))
                return
        except requests.RequestException:  # not reachable: start one of our own
            pass
    srv, api = pending_server()
    try:
        yield api
    finally:
        srv.stop()
        srv.cleanup()


def variant_features(api, name):
    """The features GET /v1/variants gives variant name on api's server (empty when unknown)."""
    vs = {v["name"]: v for v in api.get("/v1/variants").json()["variants"]}
    return set(vs.get(name, {}).get("features", []))


def offers_serving_features(api, *names):
    """Whether api's server has cuda:0 and offers every variant named paged and ragged batches
    (features page_size and seqlens): server_offering's test for the serving tests."""
    devs = [d.get("id") for d in api.get("/v1/device").json()["devices"]]
    return "cuda:0" in devs and all({"page_size", "seqlens"} <= variant_features(api, n) for n in names)


def post_run_ok(api, body):
    """A run posted as a JSON body that must end done; its record."""
    r = api.run(body=body, timeout=300)
    assert r.status_code == 200, (body, r.status_code, r.text[:1500])
    rec = r.json()
    assert rec["status"] == "done", rec
    return rec


def case_id(c):
    return "-".join("%s%s" % (k, v) for k, v in sorted(c.items())).replace(" ", "")


def upload(api, array, dtype):
    """array (numpy) as a resident tensor on cuda:0; its id."""
    import numpy as np

    r = api.post("/v1/tensors", params={"dtype": dtype, "shape": ",".join(str(n) for n in array.shape),
                                        "device": "cuda:0"}, data=np.ascontiguousarray(array).tobytes(), timeout=120)
    assert r.status_code == 201, r.text[:500]
    return r.json()["id"]
