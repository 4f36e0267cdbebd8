"""A fleet: several attnd processes keeping one history in a real PostgreSQL (store=postgresql…).

- three nodes, twenty writers each, and a poller following next_after: every run exactly once;
- run and tensor ids are global; each record and tensor names its node; node= filters; GET
  /v1/nodes lists every node with its devices, version and heartbeat;
- a tensor asked for on the wrong node answers 409 naming the node that holds it;
- losing the database loses nothing: stop PostgreSQL in the middle of a sweep, restart it, and
  count; kill an attnd while its outbox holds records, restart it, and count;
- a data_dir that has never met the database does not start without it.

The shared server (ATTND_TEST_PG, from make test) holds the databases of the first tests; the
outage tests stop and start a PostgreSQL of their own (tests/pg/pg_server.py)."""
import os
import shutil
import signal
import tempfile
import threading
import time

import subprocess
import sys

import numpy as np
import pytest

import pg_server
from attnd_api_helpers import REPO, HTTP_TIMEOUT_S, Api, AttndServer, error_of, npy_bytes, pg_database_for, tiny

ID_BITS = 32  # a fleet id is instance · 2^32 + a number local to the instance


def follow(api, after=0, limit=50):
    """Every run after `after` by next_after: (records, the last cursor)."""
    out = []
    while True:
        r = api.get("/v1/runs", params={"after": after, "limit": limit})
        assert r.status_code == 200, r.text[:500]
        body = r.json()
        out += body["runs"]
        if not body["runs"]:
            return out, after
        assert body["next_after"] > after
        after = body["next_after"]


def wait_outbox_empty(apis, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        depths = [a.get("/readyz").json()["store"]["outbox_depth"] for a in apis]
        if not any(depths):
            return
        time.sleep(0.1)
    pytest.fail("outboxes not empty after %.0f s: %r" % (timeout, depths), pytrace=False)


@pytest.fixture
def nodes(start_server):
    """Three attnd processes, nodes n0 n1 n2, on one fresh database: (conninfo, their Apis, the servers)."""
    conninfo = pg_database_for("fleet-%d-%f" % (os.getpid(), time.time()))
    servers = [start_server(extra=["--store", conninfo, "--node", "n%d" % k, "--cpu-threads", "1", "--heartbeat-s", "1"])
               for k in range(3)]
    return conninfo, [Api(srv.url) for srv in servers], servers


def test_three_nodes_sixty_writers_a_poller_sees_every_run_once(nodes):
    _, apis, servers = nodes
    per_node, per_writer = 20, 3
    created, errors = [], []
    lock = threading.Lock()

    def writer(api, k):
        w = Api(api.url)
        for i in range(per_writer):
            try:
                r = w.run(params=tiny(seed=k * 100 + i), timeout=120)
                with lock:
                    (created if r.status_code == 200 else errors).append(
                        r.json()["id"] if r.status_code == 200 else r.text[:300])
            except Exception as exc:  # noqa: BLE001 - reported below
                with lock:
                    errors.append(repr(exc))

    threads = [threading.Thread(target=writer, args=(api, n * 100 + k)) for n, api in enumerate(apis)
               for k in range(per_node)]
    for t in threads:
        t.start()
    seen, after, pages = [], 0, 0
    poller = Api(apis[0].url)
    deadline = time.monotonic() + 240
    while any(t.is_alive() for t in threads) and time.monotonic() < deadline:
        body = poller.get("/v1/runs", params={"after": after, "limit": 7}).json()
        seen += [r["id"] for r in body["runs"]]
        assert body["next_after"] >= after
        after = body["next_after"]
        pages += 1
    for t in threads:
        t.join(timeout=max(1, deadline - time.monotonic()))
    wait_outbox_empty(apis)
    rest, _ = follow(poller, after)
    seen += [r["id"] for r in rest]
    assert not errors, errors[:5]
    assert len(created) == 3 * per_node * per_writer
    assert len(seen) == len(set(seen)), "a run was seen twice"
    assert set(seen) == set(created), (sorted(set(created) - set(seen))[:10], sorted(set(seen) - set(created))[:10])
    assert pages > 1
    # Global ids: three instances, each its own range.
    assert len({i >> ID_BITS for i in created}) == 3 and all(i >> ID_BITS > 0 for i in created)
    # Every node's runs through every node, with the node named.
    everything, _ = follow(Api(apis[2].url))
    assert {r["node"] for r in everything} == {"n0", "n1", "n2"}
    for k in range(3):  # node=: one node's runs, asked of another node
        only = [r["id"] for r in everything if r["node"] == "n%d" % k]
        r = apis[(k + 1) % 3].get("/v1/runs", params={"node": "n%d" % k, "limit": 1000})
        assert [x["id"] for x in r.json()["runs"]] == only and len(only) == per_node * per_writer
    # One run of n0, asked of n1: the fleet's copy, the same record.
    one = next(r for r in everything if r["node"] == "n0")
    assert apis[1].get("/v1/runs/%d" % one["id"]).json() == apis[0].get("/v1/runs/%d" % one["id"]).json()


def test_nodes_heartbeats_and_tensors_stay_home(nodes):
    _, apis, servers = nodes
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        body = apis[1].get("/v1/nodes").json()
        if len(body["nodes"]) == 3:
            break
        time.sleep(0.2)
    assert body["this_node"] == "n1"
    listed = {n["node"]: n for n in body["nodes"]}
    assert set(listed) == {"n0", "n1", "n2"}
    for n in listed.values():
        assert n["instance"] > 0 and n["version"] and n["started"] and n["last_heartbeat"].endswith("Z")
        assert [d["id"] for d in n["devices"]] == ["cpu"]
        assert 0 <= n["heartbeat_age_s"] < 10
    # The CLI says the same.
    import io
    import json as jsonlib
    sys.path.insert(0, os.path.join(REPO, "clients", "python"))
    from attnd import cli
    out = io.StringIO()
    assert cli.main(["nodes", "--url", apis[2].url], out=out) == 0
    assert {n["node"] for n in jsonlib.loads(out.getvalue())["nodes"]} == {"n0", "n1", "n2"}
    # Heartbeats move (every second here).
    first = listed["n2"]["last_heartbeat"]
    time.sleep(2.2)
    again = {n["node"]: n for n in apis[0].get("/v1/nodes").json()["nodes"]}
    assert again["n2"]["last_heartbeat"] > first

    # A tensor lives where it was uploaded: its id is global, and the other nodes say where.
    a = np.random.default_rng(1).standard_normal((1, 2, 16, 8)).astype(np.float32)
    r = apis[0].post("/v1/tensors", params={"device": "cpu", "name": "q"}, data=npy_bytes(a), timeout=HTTP_TIMEOUT_S)
    assert r.status_code == 201, r.text
    t = r.json()
    assert t["node"] == "n0" and int(t["id"][1:]) >> ID_BITS == listed["n0"]["instance"]
    r = apis[2].get("/v1/tensors/%s" % t["id"])
    assert r.status_code == 409 and error_of(r)["code"] == "tensor_on_other_node", r.text
    assert "n0" in error_of(r)["message"]
    r = apis[2].run(params=dict(tiny(), q=t["id"], k=t["id"], v=t["id"]))
    assert r.status_code == 409 and "n0" in error_of(r)["message"], r.text
    rec = apis[0].run_ok(**dict(tiny(), q=t["id"], k=t["id"], v=t["id"]))
    assert rec["node"] == "n0"

    # A node that stopped keeps its row; max_age_s leaves it out once its heartbeat is old.
    servers[2].stop_checked()
    time.sleep(3.5)
    fresh = {n["node"] for n in apis[0].get("/v1/nodes", params={"max_age_s": 3}).json()["nodes"]}
    every = {n["node"] for n in apis[0].get("/v1/nodes", params={"max_age_s": 0}).json()["nodes"]}
    assert fresh == {"n0", "n1"} and every == {"n0", "n1", "n2"}, (fresh, every)
    r = apis[0].get("/v1/nodes", params={"max_age_s": "soon"})
    assert r.status_code == 400 and error_of(r)["field"] == "max_age_s"
    assert error_of(apis[0].get("/v1/nodes", params={"colour": "red"}))["code"] == "unknown_parameter"


# ------------------------------------------------------------------ outages


@pytest.fixture
def own_pg():
    """A PostgreSQL server of this test's own (it stops and starts it): (dir, conninfo of a database)."""
    d = tempfile.mkdtemp(prefix="pg", dir="/tmp")
    try:
        base = pg_server.start(d, fresh=True)
        yield d, pg_server.create_database(base, "fleet")
    finally:
        try:
            pg_server.stop(d, mode="immediate")
        except Exception:  # noqa: BLE001 - it may be down already
            pass
        shutil.rmtree(d, ignore_errors=True)


def store_state(api):
    return api.get("/readyz").json()["store"]


def test_database_stopped_mid_sweep_loses_and_duplicates_nothing(own_pg, start_server):
    pg_dir, conninfo = own_pg
    apis = [Api(start_server(extra=["--store", conninfo, "--node", "m%d" % k, "--cpu-threads", "1"]).url)
            for k in range(2)]
    created, errors = [], []
    lock = threading.Lock()
    stop = threading.Event()

    def writer(api, k):
        w = Api(api.url)
        i = 0
        while not stop.is_set():
            r = w.run(params=tiny(seed=k * 1000 + i), timeout=60)
            with lock:
                (created if r.status_code == 200 else errors).append(
                    r.json()["id"] if r.status_code == 200 else r.text[:300])
            i += 1

    threads = [threading.Thread(target=writer, args=(api, n * 10 + k)) for n, api in enumerate(apis) for k in range(3)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    pg_server.kill(pg_dir)                       # the database goes away mid-sweep
    time.sleep(2.0)
    with lock:
        during = len(created)
    states = [store_state(a) for a in apis]
    assert all(not s["database_up"] and s["outbox_depth"] > 0 for s in states), states
    assert all(s["last_error"] for s in states), states
    r = apis[0].get("/v1/runs")
    assert r.status_code == 503 and error_of(r)["code"] == "store_unavailable", r.text
    metrics = apis[1].get("/metrics").text
    assert 'attnd_store_up{backend="postgresql",node="m1"} 0' in metrics
    time.sleep(1.0)
    pg_server.restart(pg_dir)                    # … and comes back
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors[:5]
    assert len(created) > during > 0             # runs went on while it was away
    wait_outbox_empty(apis)
    assert all(store_state(a)["database_up"] for a in apis)
    seen, _ = follow(apis[1])
    ids = [r["id"] for r in seen]
    assert len(ids) == len(set(ids)), "duplicated"
    assert set(ids) == set(created), "lost: %r" % sorted(set(created) - set(ids))[:10]
    assert all(r["status"] == "done" for r in seen), [(r["id"], r["status"]) for r in seen if r["status"] != "done"][:10]


def test_attnd_killed_with_a_full_outbox_delivers_after_restart(own_pg, start_server):
    pg_dir, conninfo = own_pg
    data = tempfile.mkdtemp(prefix="attnd-outbox-")
    try:
        flags = ["--store", conninfo, "--node", "k0", "--cpu-threads", "1"]
        srv = AttndServer(data_dir=data, extra=flags).start()
        api = Api(srv.url)
        before = [api.run_ok(**tiny(seed=i))["id"] for i in range(3)]
        wait_outbox_empty([api])
        pg_server.kill(pg_dir)
        waiting = [api.run_ok(**tiny(seed=10 + i))["id"] for i in range(5)]
        assert store_state(api)["outbox_depth"] >= 5
        srv.proc.send_signal(signal.SIGKILL)     # no goodbye: the outbox is all there is
        srv.proc.wait(timeout=10)
        srv.cleanup()

        # It restarts without the database (this data_dir has its node number) and keeps queueing.
        srv2 = start_server(extra=flags, data_dir=data)
        api2 = Api(srv2.url)
        assert store_state(api2)["outbox_depth"] >= 5
        after_restart = api2.run_ok(**tiny(seed=20))["id"]
        assert after_restart > max(waiting)
        pg_server.restart(pg_dir)
        wait_outbox_empty([api2])
        seen, _ = follow(api2)
        ids = [r["id"] for r in seen]
        assert len(ids) == len(set(ids)), "duplicated"
        assert set(ids) == set(before + waiting + [after_restart]), ids
    finally:
        shutil.rmtree(data, ignore_errors=True)


def test_a_new_data_dir_needs_the_database_once(own_pg):
    pg_dir, conninfo = own_pg
    pg_server.stop(pg_dir)
    srv = AttndServer(extra=["--store", conninfo, "--node", "late"])
    t0 = time.monotonic()
    try:
        p = subprocess.run(srv.argv(), capture_output=True, text=True, timeout=60)
        took = time.monotonic() - t0
        assert p.returncode != 0
        assert "never met it" in p.stderr and "fleet database" in p.stderr, p.stderr[-2000:]
        assert took < 30
    finally:
        srv.cleanup()
