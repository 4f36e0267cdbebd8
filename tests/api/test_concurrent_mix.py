"""Many clients at once, each doing something else: sync and background runs on generated and
uploaded inputs, kept outputs, cancels, uploads, downloads and deletes of tensors, studies and
their cancels, worker crashes, reads of the history and the metrics. Every answer is a
documented one (no 5xx but the crashes' own and 503 no_device while the worker restarts),
every run ends, and the end state agrees with itself: the resident-bytes gauge with the tensor
table, the runs counter with the history, an empty queue, a ready server."""
import collections
import os
import random
import sys
import threading
import time

import numpy as np
import pytest
import requests

from attnd_api_helpers import HTTP_TIMEOUT_S, REPO, Api

sys.path.insert(0, os.path.join(REPO, "clients", "python"))
from attnd.client import Client  # noqa: E402

parser = pytest.importorskip("prometheus_client.parser", reason="pip prometheus_client (scripts/install-deps.sh)")

CLIENTS = 8
SECONDS = float(os.environ.get("ATTND_MIX_S", "15"))
SHAPE = (1, 2, 8, 16)
# the 5xx codes a client may meet here: a job or a tensor operation that met a worker's crash
CRASH_CODES = {"worker_crashed", "tensor_op_failed"}


class Mix:
    """What the clients share: the ids they made, what came back, and what should not have."""

    def __init__(self, url):
        self.url, self.lock = url, threading.Lock()
        self.runs, self.studies, self.tensors = set(), set(), []
        self.answers, self.wrong = collections.Counter(), []

    def note(self, what, r):
        with self.lock:
            self.answers[(what, r.status_code)] += 1
        if r.status_code < 500:
            return
        code = r.json()["error"]["code"]  # a refusal's, or a failed run record's
        if not (code in CRASH_CODES or (r.status_code == 503 and code == "no_device")):
            self.wrong.append((what, r.status_code, r.text[:300]))

    def keep(self, pool, value):
        with self.lock:
            if isinstance(pool, set):
                pool.add(value)
            else:
                pool.append(value)

    def pick(self, rnd, pool):
        with self.lock:
            return rnd.choice(sorted(pool) if isinstance(pool, set) else pool) if pool else None


def run_body(rnd, mix):
    body = {"backend": "reference", "device": "cpu", "batch": rnd.choice([1, 2]), "heads": 2,
            "seq_q": rnd.choice([1, 8, 64]), "seq_kv": rnd.choice([8, 64, 256]), "head_dim": 16,
            "iters": rnd.choice([1, 5]), "warmup": 0, "profile": False}
    tensor = mix.pick(rnd, mix.tensors) if rnd.random() < 0.3 else None
    if tensor:
        body.update(q=tensor, batch=SHAPE[0], seq_q=SHAPE[2], dtype="fp32")
    if rnd.random() < 0.3:
        body["page_size"] = 4
    if rnd.random() < 0.2:
        body["keep_output"] = True
    if rnd.random() < 0.5:
        body["async"] = True
    return body


def do_run(mix, s, rnd):
    r = s.post(mix.url + "/v1/runs", json=run_body(rnd, mix), timeout=HTTP_TIMEOUT_S)
    mix.note("run", r)
    if r.status_code in (200, 202) or (r.status_code == 500 and "id" in r.json()):
        mix.keep(mix.runs, r.json()["id"])
        kept = (r.json().get("output") or {}).get("tensor") if r.status_code == 200 else None
        if kept:
            mix.keep(mix.tensors, kept)


def on_one(what, pool, method, path):
    """An operation on one of the ids the clients made (pool: the Mix attribute), if any."""
    def operation(mix, s, rnd):
        one = mix.pick(rnd, getattr(mix, pool))
        if one:
            mix.note(what, s.request(method, mix.url + path % one, timeout=HTTP_TIMEOUT_S))
    return operation


def do_upload(mix, s, rnd):
    a = np.random.default_rng(rnd.randrange(1 << 30)).standard_normal(SHAPE).astype(np.float32)
    r = s.post(mix.url + "/v1/tensors", data=a.tobytes(), timeout=HTTP_TIMEOUT_S, params={
        "device": "cpu", "format": "raw", "dtype": "fp32", "shape": ",".join(map(str, SHAPE))})
    mix.note("upload", r)
    if r.status_code == 201:
        mix.keep(mix.tensors, r.json()["id"])


def do_study(mix, s, rnd):
    r = s.post(mix.url + "/v1/studies", timeout=HTTP_TIMEOUT_S, json={
        "variants": ["reference"], "rounds": rnd.choice([1, 2, 3]), "batch": 1, "heads": 2,
        "seq": rnd.choice([8, 64]), "head_dim": 16, "iters": 2, "warmup": 0, "profile": False})
    mix.note("study", r)
    if r.status_code == 202:
        mix.keep(mix.studies, r.json()["id"])


def do_crash(mix, s, rnd):
    mix.note("crash", s.post(mix.url + "/v1/runs", timeout=HTTP_TIMEOUT_S, json={
        "backend": "reference", "device": "cpu", "fault": "crash", "batch": 1, "heads": 1, "seq": 4,
        "head_dim": 8, "iters": 1, "warmup": 0, "profile": False}))


def do_read(mix, s, rnd):
    path = rnd.choice(["/v1/runs?limit=20&order=newest", "/metrics", "/v1/tensors", "/v1/studies",
                       "/v1/runs?group_by=backend", "/v1/device"])
    mix.note("read", s.get(mix.url + path, timeout=HTTP_TIMEOUT_S))


# what a client does, and how often (out of 100)
OPERATIONS = [
    (do_run, 35),
    (on_one("cancel", "runs", "DELETE", "/v1/runs/%d"), 8),
    (do_upload, 15),
    (on_one("delete", "tensors", "DELETE", "/v1/tensors/%s"), 10),
    (on_one("download", "tensors", "GET", "/v1/tensors/%s/data"), 8),
    (do_study, 6),
    (on_one("study cancel", "studies", "DELETE", "/v1/studies/%d"), 4),
    (do_crash, 1),
    (do_read, 13),
]


def client(mix, seed, end):
    rnd, s = random.Random(seed), requests.Session()
    ops, weights = zip(*OPERATIONS)
    while time.monotonic() < end:
        rnd.choices(ops, weights)[0](mix, s, rnd)


def metric_sum(text, name, **labels):
    total = 0.0
    for family in parser.text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def test_clients_doing_everything_at_once(start_server):
    srv = start_server(extra=["--devices", "none", "--cpu-threads", "2", "--queue-depth", "8",
                              "--enable-fault-injection", "true", "--max-tensors", "100000"])
    api, mix = Api(srv.url), Mix(srv.url)
    end = time.monotonic() + SECONDS
    threads = [threading.Thread(target=client, args=(mix, seed, end)) for seed in range(CLIENTS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not mix.wrong, mix.wrong[:10]
    assert mix.answers[("crash", 500)] and mix.answers[("run", 200)] and mix.answers[("delete", 200)], dict(mix.answers)

    deadline = time.monotonic() + 120
    open_runs = set(mix.runs)
    while open_runs and time.monotonic() < deadline:
        open_runs = {i for i in open_runs if api.get("/v1/runs/%d" % i).json()["status"] in ("queued", "running")}
        time.sleep(0.2)
    assert not open_runs, "runs that never ended: %s" % sorted(open_runs)[:20]
    for study_id in sorted(mix.studies):
        rec = api.get("/v1/studies/%d" % study_id, params={"wait": 60}, timeout=90).json()
        assert rec["status"] in ("done", "cancelled"), rec

    srv.wait_ready()
    metrics = api.get("/metrics").text
    tensors = api.get("/v1/tensors").json()["tensors"]
    assert metric_sum(metrics, "attnd_resident_tensor_bytes") == sum(
        t["bytes"] for t in tensors if t["state"] == "resident")
    assert metric_sum(metrics, "attnd_queue_depth") == 0
    for status in ("done", "failed", "cancelled"):
        in_history = sum(1 for _ in Client(srv.url).iter_runs(status=status, limit=1000))
        assert metric_sum(metrics, "attnd_runs_total", status=status) == in_history, status
    resident = [t for t in tensors if t["state"] == "resident"]
    if resident:
        assert api.get("/v1/tensors/%s/data" % resident[-1]["id"]).status_code == 200
