"""GET /openapi.json: the OpenAPI 3.0 document (docs/openapi.json) describes every route the
server has, and the server's answers conform to it: a bounded schemathesis run (pip
`schemathesis`) over the safe endpoints plus POST /v1/runs with the cpu reference backend."""
import copy
import json
import os
import re
import subprocess
import sys
import time

import pytest

from attnd_api_helpers import REPO, openapi_json_schema

DOC = os.path.join(REPO, "docs", "openapi.json")
FUZZ_LIMIT_S = 110


def load_doc():
    with open(DOC) as f:
        return json.load(f)


def route_table():
    """(method, path) of every entry of the route table in server/front/routes/table.c."""
    with open(os.path.join(REPO, "server", "front", "routes", "table.c")) as f:
        text = f.read()
    table = text[text.index("routes[] = {"):]
    table = table[:table.index("};")]
    return {(m.lower(), p) for m, p in re.findall(r'\{"([A-Z]+)",\s*"([^"]+)"', table)}


def doc_paths(doc):
    return {(m, re.sub(r"\{[^}]+\}", "{id}", p)) for p, item in doc["paths"].items() for m in item
            if m in ("get", "post", "put", "delete", "patch")}


def test_document_is_valid_openapi():
    validator = pytest.importorskip("openapi_spec_validator", reason="installed with schemathesis")
    doc = load_doc()
    assert doc["openapi"].startswith("3.0")
    validator.validate(doc)


def test_every_route_is_documented():
    doc = doc_paths(load_doc())
    routes = {(m, re.sub(r"\{[^}]+\}", "{id}", p)) for m, p in route_table()}
    missing = routes - doc
    assert not missing, "routes in server/front/routes/table.c without an OpenAPI entry: %s" % sorted(missing)
    # And nothing documented that the server lacks.
    extra = doc - routes
    assert not extra, "documented but not routed: %s" % sorted(extra)


def test_served_document_is_the_file(api):
    r = api.get("/openapi.json")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("application/json")
    assert r.json() == load_doc()


SAFE_GETS = {"/healthz", "/readyz", "/v1/device", "/v1/variants", "/v1/runs", "/v1/runs/{id}",
             "/v1/runs/{id}/trace", "/metrics", "/openapi.json", "/v1/tensors", "/v1/tensors/{id}",
             "/v1/tensors/{id}/data", "/v1/studies", "/v1/studies/{id}", "/v1/compare"}
# POST /v1/runs is fuzzed in positive mode with every size given in the body: a missing size
# would take the study's default shape, far too big for the cpu reference in CI.
TINY = {"backend": {"type": "string", "enum": ["reference"]}, "device": {"type": "string", "enum": ["cpu"]},
        "batch": {"type": "integer", "minimum": 1, "maximum": 2}, "heads": {"type": "integer", "minimum": 1, "maximum": 2},
        "seq": {"type": "integer", "minimum": 1, "maximum": 16}, "head_dim": {"type": "integer", "minimum": 1, "maximum": 16},
        "warmup": {"type": "integer", "minimum": 0, "maximum": 1}, "iters": {"type": "integer", "minimum": 1, "maximum": 2}}
OPTIONAL = ("seq_q", "seq_kv", "dtype", "mask", "seed", "target_noise", "cache", "graph", "verify", "profile")


def fuzz_documents(doc):
    """Two copies of the document: the safe GETs (fuzzed positive and negative), and POST
    /v1/runs restricted to tiny cpu reference runs (fuzzed positive). Response schemas are
    the document's own."""
    gets = copy.deepcopy(doc)
    for path in list(gets["paths"]):
        item = gets["paths"][path]
        for method in list(item):
            if method != "get" or path not in SAFE_GETS:
                del item[method]
        if not item:
            del gets["paths"][path]
    post = copy.deepcopy(doc)
    post["paths"] = {"/v1/runs": {"post": post["paths"]["/v1/runs"]["post"]}}
    op = post["paths"]["/v1/runs"]["post"]
    op["parameters"] = []
    op["requestBody"]["required"] = True
    rp = post["components"]["schemas"]["RunParams"]
    props = {k: v for k, v in rp["properties"].items() if k in OPTIONAL}
    for name in ("seq_q", "seq_kv"):
        props[name] = dict(props[name], maximum=16)
    # cJSON reads 0.9999999999999999 in a body as 1.0 (it rounds the last digit), which the
    # server then rightly refuses; the fuzzer stays a step away from that edge.
    props["target_noise"] = dict(props["target_noise"], maximum=0.99, exclusiveMaximum=False)
    # graph and cold caches are GPU-only (422 not_applicable on cpu), which no schema can say
    props["graph"] = dict(props["graph"], enum=[False])
    props["cache"] = dict(props["cache"], enum=["hot"])
    props.update(TINY)
    rp["properties"] = props
    rp["required"] = sorted(TINY)
    return gets, post


def run_schemathesis(st, schema, url, mode, checks, tmp_path, max_time):
    argv = st + ["run", str(schema), "--url", url, "--checks", ",".join(checks), "--max-examples", "10",
            "--seed", "5", "--workers", "2", "--mode", mode, "--phases", "examples,coverage,fuzzing", "--no-color",
            "--request-timeout", "20", "--max-time", str(max_time), "--generation-database", "none",
            "--suppress-health-check", "all"]
    try:
        p = subprocess.run(argv, cwd=str(tmp_path), capture_output=True, text=True, timeout=max_time + 30)
    except subprocess.TimeoutExpired as exc:
        pytest.fail("schemathesis ran past %d s:\n%s" % (max_time + 30, (exc.stdout or "")[-4000:]), pytrace=False)
    out = p.stdout + p.stderr
    assert p.returncode == 0, "schemathesis (%s, mode %s) found nonconforming answers:\n%s" % (schema.name, mode,
                                                                                              out[-12000:])


def test_schemathesis_conformance(start_server, tmp_path):
    pytest.importorskip("schemathesis", reason="pip schemathesis (scripts/install-deps.sh installs it)")
    st = [sys.executable, "-m", "schemathesis.cli"]  # the CLI of the Python running the tests
    srv = start_server(extra=["--cpu-threads", "2"])
    gets, post = fuzz_documents(load_doc())
    g, p = tmp_path / "openapi-gets.json", tmp_path / "openapi-post-runs.json"
    g.write_text(json.dumps(gets))
    p.write_text(json.dumps(post))
    conformance = ["not_a_server_error", "status_code_conformance", "content_type_conformance",
                   "response_headers_conformance", "response_schema_conformance"]
    run_schemathesis(st, g, srv.url, "all", conformance + ["negative_data_rejection"], tmp_path, 30)
    run_schemathesis(st, p, srv.url, "positive", conformance + ["positive_data_acceptance"], tmp_path, 30)
    assert srv.proc.poll() is None, "attnd died under the fuzzer:\n" + srv.stderr_text()


def test_stored_records_match_the_run_schema(start_server):
    """Records of every kind the cpu device makes — done with verify and a kept output,
    failed, cancelled while queued, refused-then-listed — validated against the document's
    Run schema, which types every field (additionalProperties false: a field the server
    adds and the document lacks fails here)."""
    import threading

    import jsonschema
    import requests

    from attnd_api_helpers import tiny

    schema = openapi_json_schema("Run")
    srv = start_server(extra=["--enable-fault-injection", "true", "--queue-depth", "2", "--job-timeout-s", "3",
                              "--cpu-threads", "1"])
    u = srv.url
    ids = [requests.post(u + "/v1/runs", json=tiny(verify=True, keep_output=True), timeout=60).json()["id"],
           requests.post(u + "/v1/runs", json=tiny(iters=1), timeout=60).json()["id"],
           requests.post(u + "/v1/runs", json=tiny(seed=str(2 ** 64 - 1), profile=False), timeout=60).json()["id"]]
    crashed = requests.post(u + "/v1/runs", json=tiny(fault="crash"), timeout=60)
    assert crashed.status_code == 500
    ids.append(crashed.json()["id"])
    hang = threading.Thread(target=lambda: requests.post(u + "/v1/runs", json=tiny(fault="hang"), timeout=60))
    hang.start()
    time.sleep(0.5)
    queued = requests.post(u + "/v1/runs", json=tiny(**{"async": True}), timeout=30).json()["id"]
    listed_queued = requests.get(u + "/v1/runs/%d" % queued, timeout=10).json()
    assert requests.delete(u + "/v1/runs/%d" % queued, timeout=10).status_code == 200
    ids.append(queued)
    hang.join(timeout=30)
    records = [listed_queued] + [requests.get(u + "/v1/runs/%d" % i, timeout=10).json() for i in ids]
    records += requests.get(u + "/v1/runs?limit=100", timeout=10).json()["runs"]
    statuses = set()
    for rec in records:
        jsonschema.Draft4Validator(schema).validate(rec)
        statuses.add(rec["status"])
    assert {"done", "failed", "cancelled", "queued"} <= statuses, statuses
