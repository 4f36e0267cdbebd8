"""Results survive a restart: same data dir, same records; ids keep growing."""
import shutil
import tempfile

import pytest

from attnd_api_helpers import Api, tiny


@pytest.fixture
def data_dir():
    d = tempfile.mkdtemp(prefix="attnd-persist-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_results_survive_restart(start_server, data_dir):
    flags = ["--enable-fault-injection", "true", "--job-timeout-s", "5"]
    srv = start_server(extra=flags, data_dir=data_dir)
    api = Api(srv.url)
    done = [api.run_ok(**tiny(seed=s, dtype=dt, verify="true"))
            for s, dt in ((31, "bf16"), (32, "fp16"), (33, "fp32"))]
    r = api.run(params=tiny(fault="crash"), timeout=60)
    assert r.status_code == 500, r.text[:500]
    failed = r.json()
    before = {rec["id"]: api.get("/v1/runs/%d" % rec["id"]).json() for rec in done + [failed]}
    for rec in done:
        assert before[rec["id"]] == rec
    srv.stop_checked()

    srv2 = start_server(extra=flags, data_dir=data_dir)
    api2 = Api(srv2.url)
    for rid, rec in before.items():
        r = api2.get("/v1/runs/%d" % rid)
        assert r.status_code in (200, 500), r.text[:500]
        assert r.json() == rec, "run %d changed across a restart" % rid
    newer = api2.run_ok(**tiny(seed=34))
    assert newer["id"] > max(before), "ids must keep growing across restarts"
    srv2.stop_checked()
