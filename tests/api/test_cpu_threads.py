"""--cpu-threads caps every thread a worker's CPU work starts, not only the reference's: a
reference run, a fingerprinted upload and a download filled in parallel leave a worker under
--cpu-threads 1 with the threads it started with, while one under --cpu-threads 2 starts a
helper (docs/operations.md, "cpu device")."""
import os

import numpy as np
import pytest

from attnd_api_helpers import Api, child_pids, download, tiny, upload_raw

MIB = 1 << 20


def worker_pid(srv):
    pids = child_pids(srv.proc.pid)
    assert len(pids) == 1, "one worker (the cpu device) expected: %s" % pids
    return pids[0]


def threads_of(pid):
    return len(os.listdir("/proc/%d/task" % pid))


def cpu_work(api):
    """A reference run big enough to deserve two threads, then a 64 MiB upload and download."""
    api.run_ok(**tiny(batch=2, heads=4, seq_q=256, seq_kv=256, head_dim=64, iters=2, warmup=0))
    data = np.random.default_rng(3).standard_normal(16 * MIB, dtype=np.float32)
    tid = upload_raw(api, data.tobytes(), data.size)
    assert download(api, tid, "raw").content == data.tobytes()


def threads_after_work(start_server, cap):
    srv = start_server(extra=["--cpu-threads", str(cap)])
    pid = worker_pid(srv)
    before = threads_of(pid)
    cpu_work(Api(srv.url))
    return before, threads_of(pid)


def test_cpu_threads_one_starts_no_helper(start_server):
    before, after = threads_after_work(start_server, 1)
    assert after == before, "--cpu-threads 1, yet the worker went from %d threads to %d" % (before, after)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: no helper is ever started")
def test_cpu_threads_two_starts_one_helper(start_server):
    before, after = threads_after_work(start_server, 2)
    assert after == before + 1, "--cpu-threads 2: one helper expected, %d threads then %d" % (before, after)
