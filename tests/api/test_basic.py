"""The server as a process and its read-only endpoints: --help, settings precedence,
/healthz, /readyz, /v1/device, /v1/variants, unknown paths and methods, SIGTERM."""
import json
import re
import subprocess

import pytest
import requests

from attnd_api_helpers import REPO, attnd_bin, error_of, tiny

SETTINGS = ["listen", "data_dir", "config", "devices", "queue_depth", "job_timeout_s", "max_body_bytes",
            "memory_budget_bytes", "token_file", "log_level", "verify_cpu_max_macs", "cpu_threads",
            "enable_fault_injection", "max_upload_bytes", "max_connections", "max_connections_per_ip",
            "header_timeout_s", "idle_timeout_s", "max_tensors", "cpu_max_macs"]

CPU_VARIANTS = {"reference"}
GPU_VARIANTS = {"naive", "naive_inplace", "math"}


def test_help_lists_every_setting():
    p = subprocess.run([attnd_bin(), "--help"], cwd=REPO, capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    text = p.stdout + p.stderr
    for name in SETTINGS:
        flag = "--" + name.replace("_", "-")
        env = "ATTND_" + name.upper()
        assert flag in text, "--help does not list %s" % flag
        assert env in text, "--help does not list %s" % env


def test_unknown_flag_is_refused():
    p = subprocess.run([attnd_bin(), "--no-such-flag", "1"], cwd=REPO, capture_output=True, text=True, timeout=10)
    assert p.returncode != 0
    assert "no-such-flag" in (p.stdout + p.stderr)


def test_bad_setting_value_is_refused(tmp_path):
    p = subprocess.run([attnd_bin(), "--queue-depth", "0", "--data-dir", str(tmp_path), "--devices", "none",
                        "--listen", "127.0.0.1:0"], cwd=REPO, capture_output=True, text=True, timeout=10)
    assert p.returncode != 0
    assert "queue" in (p.stdout + p.stderr).lower()


def test_healthz(api):
    r = api.get("/healthz")
    assert r.status_code == 200
    assert r.json() == {"status": "ok"}


def test_readyz(api):
    r = api.get("/readyz")
    assert r.status_code == 200
    assert r.json().get("ready") is True


def test_device_lists_cpu_only(api):
    r = api.get("/v1/device")
    assert r.status_code == 200
    devs = r.json()["devices"]
    assert isinstance(devs, list) and devs
    ids = [d["id"] for d in devs]
    assert ids[0] == "cpu"
    assert ids == ["cpu"], "--devices none must serve the cpu device only, got %r" % ids


def test_variants_table(api):
    r = api.get("/v1/variants")
    assert r.status_code == 200
    vs = r.json()["variants"]
    by_name = {v["name"]: v for v in vs}
    assert len(by_name) == len(vs), "variant names repeat"
    for name in CPU_VARIANTS | GPU_VARIANTS:
        assert name in by_name, "missing variant %s" % name
    for v in vs:
        for key in ("name", "summary", "device", "dtypes", "masks", "head_dim", "min_compute_capability",
                    "available", "why"):
            assert key in v, "variant %s lacks %s" % (v.get("name"), key)
        assert v["device"] in ("cpu", "cuda"), v
        assert isinstance(v["summary"], str) and v["summary"], v
        assert set(v["dtypes"]) <= {"bf16", "fp16", "fp32"} and v["dtypes"], v
        assert set(v["masks"]) <= {"none", "causal", "causal_bottom_right"} and v["masks"], v
        assert isinstance(v["available"], bool)
        if not v["available"]:
            assert isinstance(v["why"], str) and v["why"], "unavailable %s must say why" % v["name"]
    ref = by_name["reference"]
    assert ref["device"] == "cpu" and ref["available"] is True
    assert set(ref["dtypes"]) == {"bf16", "fp16", "fp32"}
    for name in GPU_VARIANTS:
        v = by_name[name]
        assert v["device"] == "cuda"
        # No GPU on this server: a GPU variant cannot be available, and it says why.
        assert v["available"] is False, "%s available on a server without GPUs" % name
        assert "gpu" in v["why"].lower() or "cuda" in v["why"].lower(), v["why"]


def test_unknown_path_404(api):
    for path in ("/nope", "/v1/nope", "/v2/runs"):
        r = api.get(path)
        assert r.status_code == 404, path
        error_of(r)


@pytest.mark.parametrize("method,path", [("POST", "/healthz"), ("PUT", "/v1/runs"), ("DELETE", "/v1/variants"),
                                         ("GET", "/run"), ("PATCH", "/v1/device")])
def test_wrong_method_405(api, method, path):
    r = api.request(method, path)
    assert r.status_code == 405, "%s %s answered %d" % (method, path, r.status_code)
    error_of(r)


def test_env_setting_applies(start_server):
    """ATTND_MAX_BODY_BYTES=1024: a 2000-byte body is refused with 413."""
    srv = start_server(env={"ATTND_MAX_BODY_BYTES": "1024"})
    body = '{"backend":"reference","pad":"%s"}' % ("x" * 2000)
    r = requests.post(srv.url + "/v1/runs", data=body, headers={"Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 413, r.text[:500]
    error_of(r)


def test_flag_beats_env(start_server):
    """The flag wins over the environment: the 2000-byte body is read (and refused for its
    unknown parameter, not its size)."""
    srv = start_server(extra=["--max-body-bytes", "1048576"], env={"ATTND_MAX_BODY_BYTES": "1024"})
    body = '{"backend":"reference","pad":"%s"}' % ("x" * 2000)
    r = requests.post(srv.url + "/v1/runs", data=body, headers={"Content-Type": "application/json"}, timeout=10)
    assert r.status_code == 400, r.text[:500]
    assert error_of(r)["field"] == "pad"


def test_sigterm_exits_zero_promptly(start_server):
    srv = start_server()
    r = requests.post(srv.url + "/v1/runs", params=tiny(), timeout=60)
    assert r.status_code == 200, r.text[:500]
    secs = srv.stop_checked()
    assert secs < 10.0


def test_readme_cpu_example_runs_as_printed(server):
    """The README's first example works on any machine: run as printed, it answers the shape
    and the fingerprint the README shows (the inputs are seeded; only the time differs)."""
    with open(REPO + "/README.md") as f:
        readme = f.read()
    m = re.search(r"^(curl -s -X POST 'localhost:8080/run\?backend=reference&device=cpu[^']*' \| jq .*)$\n```\n```json\n"
                  r"(.*)$", readme, re.M)
    assert m, "the README's cpu example is gone"
    cmd = m.group(1).replace("localhost:8080", server.url.split("//", 1)[1])
    p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    got, shown = json.loads(p.stdout), json.loads(m.group(2))
    assert set(got) == set(shown) and got["median_us"] > 0, (got, shown)
    assert (got["shape"], got["fingerprint"]) == (shown["shape"], shown["fingerprint"]), (got, shown)


def test_readme_gpu_example_shows_the_error_without_a_gpu(server):
    # The README's curl | jq example, run as printed against this GPU-less server: the
    # answer is the 503 body, not a jq error.
    with open(REPO + "/README.md") as f:
        readme = f.read()
    m = re.search(r"^(curl -s -X POST 'localhost:8080/run\?backend=math' \| jq .*)$", readme, re.M)
    assert m, "the README's GPU example is gone"
    cmd = m.group(1).replace("localhost:8080", server.url.split("//", 1)[1])
    p = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    err = json.loads(p.stdout)["error"]
    assert err["code"] == "no_device" and err["field"] == "device"
    assert err["message"] in readme  # the README shows the same answer
