"""GET /metrics: Prometheus text format, parsed with prometheus_client's own parser; names
follow its conventions (attnd_ prefix, _total counters, _seconds, _bytes); every family is in
docs/api.md's table and the table has no other."""
import os
import re

import pytest

from attnd_api_helpers import REPO, Api, tiny

parser = pytest.importorskip("prometheus_client.parser", reason="pip prometheus_client (scripts/install-deps.sh)")


def families(api):
    r = api.get("/metrics")
    assert r.status_code == 200
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers
    return {f.name: f for f in parser.text_string_to_metric_families(r.text)}, r.text


def samples(fam, name=None):
    return [s for s in fam.samples if name is None or s.name == name]


def value(fam, name, **labels):
    for s in fam.samples:
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
            return s.value
    return None


@pytest.fixture
def fresh(start_server):
    return Api(start_server(extra=["--cpu-threads", "2"]).url)


def test_metrics_parse_and_count(fresh):
    api = fresh
    fams, text = families(api)
    for line in text.splitlines():
        if line and not line.startswith("#"):
            assert line.startswith("attnd_"), line
    # The parser strips _total from counter family names.
    expect = {"attnd_queue_depth": "gauge", "attnd_workers_up": "gauge", "attnd_worker_restarts": "counter",
              "attnd_gpu_memory_total_bytes": "gauge", "attnd_gpu_memory_used_bytes": "gauge",
              "attnd_runs": "counter", "attnd_run_gpu_seconds": "histogram", "attnd_run_cpu_seconds": "histogram",
              "attnd_build_info": "gauge", "attnd_queue_wait_seconds": "histogram",
              "attnd_http_request_duration_seconds": "histogram",
              "attnd_resident_tensor_bytes": "gauge", "attnd_http_requests": "counter"}
    for name, kind in expect.items():
        assert name in fams and fams[name].type == kind, (name, fams.get(name))
    assert value(fams["attnd_workers_up"], "attnd_workers_up", device="cpu") == 1
    assert value(fams["attnd_queue_depth"], "attnd_queue_depth", device="cpu") == 0
    assert value(fams["attnd_worker_restarts"], "attnd_worker_restarts_total", device="cpu") == 0
    assert value(fams["attnd_resident_tensor_bytes"], "attnd_resident_tensor_bytes", device="cpu") == 0

    for i in range(3):
        api.run_ok(**tiny(seed=i))
    assert api.run(params=tiny(batch=0)).status_code == 400
    api.get("/no/such/path")
    fams, _ = families(api)
    assert value(fams["attnd_runs"], "attnd_runs_total", backend="reference", status="done") == 3
    # cpu runs are wall time: their own family, never labelled as GPU seconds
    assert not [s for s in samples(fams["attnd_run_gpu_seconds"], "attnd_run_gpu_seconds_count")
                if s.labels.get("device") == "cpu"]
    h = fams["attnd_run_cpu_seconds"]
    assert value(h, "attnd_run_cpu_seconds_count", backend="reference", device="cpu") == 3
    assert value(h, "attnd_run_cpu_seconds_bucket", backend="reference", device="cpu", le="+Inf") == 3
    assert value(h, "attnd_run_cpu_seconds_sum", backend="reference", device="cpu") > 0
    buckets = [s for s in samples(h, "attnd_run_cpu_seconds_bucket")]
    counts = [s.value for s in buckets]
    assert counts == sorted(counts), "histogram buckets must be cumulative"
    http = fams["attnd_http_requests"]
    assert value(http, "attnd_http_requests_total", method="POST", route="/v1/runs", status="200") == 3
    assert value(http, "attnd_http_requests_total", method="POST", route="/v1/runs", status="400") == 1
    assert value(http, "attnd_http_requests_total", method="GET", route="unmatched", status="404") == 1
    assert value(http, "attnd_http_requests_total", method="GET", route="/metrics", status="200") >= 1
    # the build serving, as /v1/device and every record name it
    build = api.get("/v1/device").json()["build"]
    assert value(fams["attnd_build_info"], "attnd_build_info", version=build["version"], commit=build["commit"]) == 1
    # how long runs waited and requests took: one observation each, in order
    q = fams["attnd_queue_wait_seconds"]
    assert value(q, "attnd_queue_wait_seconds_count", device="cpu") == 3
    d = fams["attnd_http_request_duration_seconds"]
    assert value(d, "attnd_http_request_duration_seconds_count", method="POST", route="/v1/runs") == 4
    assert 0 < value(d, "attnd_http_request_duration_seconds_sum", method="POST", route="/v1/runs") < 60


def test_every_family_is_in_the_docs_table(fresh):
    """The docs' metrics table and GET /metrics name the same families."""
    fresh.run_ok(**tiny(seed=1))
    served = set(re.findall(r"^# TYPE (attnd_\w+) ", fresh.get("/metrics").text, re.M))
    with open(os.path.join(REPO, "docs", "api.md"), encoding="utf-8") as f:
        text = f.read()
    table = text[text.index("## Metrics"):text.index("## Resident tensors")]
    documented = set(re.findall(r"`(attnd_\w+)`", table))
    assert served == documented, ("served, not in the table: %s" % sorted(served - documented),
                                  "in the table, not served: %s" % sorted(documented - served))
