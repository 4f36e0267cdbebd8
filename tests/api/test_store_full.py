"""No acknowledged run lost when data_dir's disk is full.

data_dir lives on a small tmpfs mounted for the test, and the test fills it with a file while
runs are in flight, so SQLite really fails to write (SQLITE_FULL): nothing is simulated. (A
tmpfs needs CAP_SYS_ADMIN; where the test cannot mount one it is skipped and says so. Root
without a mount namespace of its own still can: `mount -t tmpfs` is all it takes.)

Checked, live: a run whose final record the file refuses is still answered `done` by GET (not
`running`), /readyz is not ready and names the store and its error, the metrics count the
refused writes and the records waiting, and a new run is refused 507 `store_full` before it
starts; once space is freed the records reach the store (the history lists them done) and
/readyz is ready again. After a restart they read `done`, also when the server was killed
while the disk was still full (the records waited in data_dir/attnd.pending, whose room was
allocated at start), not `failed` with `server_restarted`. And a data_dir without room for that
reserve refuses runs, and says so in /readyz, until it has it.
"""
import errno
import os
import re
import subprocess
import threading
import time

import pytest
import requests

from attnd_api_helpers import RUN_TIMEOUT_S, Api, AttndServer, store_under_test, tiny

FS_SIZE = "12m"   # room for attnd.db, its WAL and the 4 MiB reserve of attnd.pending
# A cpu run of several seconds: the disk is filled while it runs.
SLOW = tiny(heads=8, seq=1024, head_dim=64, iters=60, profile="false")
WAIT_S = 60.0


@pytest.fixture
def small_fs(tmp_path):
    """A 12 MiB tmpfs, mounted for the test and unmounted after it."""
    mnt = tmp_path / "fs"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=" + FS_SIZE, "tmpfs", str(mnt)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs CAP_SYS_ADMIN): " + (r.stderr or r.stdout).strip())
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(mnt):
    """Write a file until the file system has not one byte left; returns its path."""
    path = os.path.join(str(mnt), "filler")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    chunk = 1 << 20
    try:
        while chunk:
            try:
                if os.write(fd, b"\0" * chunk) < chunk:
                    chunk //= 2
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                chunk //= 2
    finally:
        os.close(fd)
    assert os.statvfs(str(mnt)).f_bavail == 0
    return path


def server_on(tmp_path, data_dir, wait_ready=True):
    """An attnd on data_dir (on the small file system), its log outside it."""
    # SLOW is bounded by its iters, not by the cpu cost check (it dwells on purpose).
    srv = AttndServer(data_dir=str(data_dir), extra=["--cpu-threads", "2", "--cpu-max-macs", "0"])
    srv.stderr_path = str(tmp_path / ("stderr-%d.log" % time.monotonic_ns()))
    if not wait_ready:
        srv.wait_ready = lambda: None
    return srv.start()


def wait_for(what, fn, timeout=WAIT_S, every=0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = fn()
        if last:
            return last
        time.sleep(every)
    pytest.fail("%s: not within %.0f s (last: %r)" % (what, timeout, last), pytrace=False)


def status_of(api, run_id):
    r = api.get("/v1/runs/%d" % run_id)
    return r.json().get("status") if r.status_code == 200 else "HTTP %d" % r.status_code


def metric(text, name, **labels):
    """The value of metric `name` whose labels include `labels`; None when absent."""
    for line in text.splitlines():
        m = re.match(r"^%s\{([^}]*)\} (\S+)$" % re.escape(name), line)
        if m and all('%s="%s"' % kv in m.group(1) for kv in labels.items()):
            return float(m.group(2))
    return None


def listed(api, run_id):
    """The run as the history lists it (what the store holds, not what waits in memory); None
    when it is not listed. The cursor is a position, not an id, in a fleet: read every page."""
    after = 0
    while True:
        r = api.get("/v1/runs", params={"after": after, "limit": 1000})
        if r.status_code != 200:
            return None
        page = r.json()
        for run in page["runs"]:
            if run["id"] == run_id:
                return run
        if not page["runs"]:
            return None
        after = page["next_after"]


def fill_while_running(api, mnt):
    """Start an async run, then a sync one behind it; fill the disk while the first runs.
    Returns (async id, the thread's answer holder, the thread, the filler's path)."""
    r = api.post("/v1/runs", json=dict(SLOW, **{"async": True}))
    assert r.status_code == 202, r.text
    a = r.json()["id"]
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", api.run(params=dict(SLOW, seed=7), timeout=RUN_TIMEOUT_S * 2)))
    t.start()
    wait_for("run %d running" % a, lambda: status_of(api, a) == "running")
    wait_for("the sync run stored and queued", lambda: status_of(api, a + 1) == "queued")
    filler = fill(mnt)
    assert status_of(api, a) == "running", "the run ended before the disk was full: make SLOW slower"
    return a, out, t, filler


def test_full_disk_keeps_done_records_live_and_after_restart(tmp_path, small_fs):
    data_dir = small_fs / "data"
    srv = server_on(tmp_path, data_dir)
    try:
        api = Api(srv.url)
        a, out, t, filler = fill_while_running(api, small_fs)
        t.join(RUN_TIMEOUT_S * 2)
        assert not t.is_alive(), "the sync run did not answer"
        sync = out["r"]
        assert sync.status_code == 200 and sync.json()["status"] == "done", sync.text[:500]
        b = sync.json()["id"]
        assert b == a + 1

        # Live: both answered from what waits, never "running".
        rec_a = api.get("/v1/runs/%d" % a).json()
        rec_b = api.get("/v1/runs/%d" % b).json()
        assert rec_a["status"] == "done", rec_a
        assert rec_b["status"] == "done" and rec_b["timing"] == sync.json()["timing"], rec_b
        assert listed(api, a)["status"] == "running"  # the file has not taken it yet

        ready = api.get("/readyz")
        assert ready.status_code == 503, ready.text
        body = ready.json()
        assert body["ready"] is False
        assert "attnd.db" in body["message"] and "full" in body["message"], body
        assert body["message"].startswith("the %s store" % body["store"]["backend"]), body
        assert body["store"]["writable"] is False and body["store"]["pending_records"] == 2, body

        text = api.get("/metrics").text
        assert metric(text, "attnd_store_write_failures_total") >= 2, text
        assert metric(text, "attnd_store_pending_records", kept="journal") == 2, text
        assert metric(text, "attnd_store_pending_records", kept="memory") == 0, text

        refused = api.run(params=tiny())
        assert refused.status_code == 507 and refused.json()["error"]["code"] == "store_full", refused.text

        # Space again: the records land, the server is ready, runs are taken.
        os.remove(filler)
        wait_for("/readyz ready after space was freed", lambda: api.get("/readyz").status_code == 200)
        for run_id in (a, b):
            row = wait_for("run %d in the history" % run_id, lambda: listed(api, run_id))
            assert row["status"] == "done", row
        text = api.get("/metrics").text
        assert metric(text, "attnd_store_pending_records", kept="journal") == 0, text
        assert api.run_ok(**tiny())["status"] == "done"
        srv.stop_checked()

        srv = server_on(tmp_path, data_dir)
        api = Api(srv.url)
        assert api.get("/v1/runs/%d" % a).json() == rec_a
        assert api.get("/v1/runs/%d" % b).json() == rec_b
    finally:
        srv.kill()
        srv.cleanup()


def test_records_waiting_in_the_journal_survive_a_crash_on_a_full_disk(tmp_path, small_fs):
    data_dir = small_fs / "data"
    srv = server_on(tmp_path, data_dir)
    try:
        api = Api(srv.url)
        a, out, t, filler = fill_while_running(api, small_fs)
        t.join(RUN_TIMEOUT_S * 2)
        b = out["r"].json()["id"]
        rec_a = api.get("/v1/runs/%d" % a).json()
        rec_b = api.get("/v1/runs/%d" % b).json()
        assert rec_a["status"] == "done" and rec_b["status"] == "done", (rec_a, rec_b)
        srv.kill()  # SIGKILL, the disk still full

        # The restart finds them in the journal, not "failed: server_restarted".
        srv = server_on(tmp_path, data_dir, wait_ready=False)
        api = Api(srv.url)
        assert api.get("/v1/runs/%d" % a).json() == rec_a
        assert api.get("/v1/runs/%d" % b).json() == rec_b
        ready = api.get("/readyz")
        assert ready.status_code == 503 and ready.json()["store"]["pending_records"] == 2, ready.text

        os.remove(filler)
        wait_for("/readyz ready after space was freed", lambda: api.get("/readyz").status_code == 200)
        assert listed(api, a)["status"] == "done" and listed(api, b)["status"] == "done"
        srv.stop_checked()

        srv = server_on(tmp_path, data_dir)
        api = Api(srv.url)
        assert api.get("/v1/runs/%d" % a).json() == rec_a
        assert api.get("/v1/runs/%d" % b).json() == rec_b
    finally:
        srv.kill()
        srv.cleanup()


def test_no_room_for_the_reserve_refuses_runs_until_there_is(tmp_path, small_fs):
    """A data_dir without room for attnd.pending's reserve cannot promise to keep a result:
    the server starts, says why it is not ready and refuses runs, until the room is there."""
    subprocess.run(["mount", "-o", "remount,size=2m", str(small_fs)], check=True)
    srv = server_on(tmp_path, small_fs / "data", wait_ready=False)
    try:
        api = Api(srv.url)
        ready = api.get("/readyz")
        assert ready.status_code == 503, ready.text
        message = ready.json()["message"]
        assert "attnd.pending" in message and "No space left" in message, message
        assert ready.json()["store"]["reserve_bytes"] == 0
        refused = api.run(params=tiny())
        assert refused.status_code == 507 and refused.json()["error"]["code"] == "store_full", refused.text

        subprocess.run(["mount", "-o", "remount,size=" + FS_SIZE, str(small_fs)], check=True)
        wait_for("/readyz ready once the reserve fits", lambda: api.get("/readyz").status_code == 200)
        assert api.get("/readyz").json()["store"]["reserve_bytes"] == 4 << 20
        assert api.run_ok(**tiny())["status"] == "done"
        srv.stop_checked()
    finally:
        srv.kill()
        srv.cleanup()
