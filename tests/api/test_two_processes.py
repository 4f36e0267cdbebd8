"""The front and its workers are two programs (docs/architecture.md): the front, attnd, links
and maps no CUDA library and stays small; it starts attnd-worker beside itself, which holds
CUDA and cuDNN and reports what it loaded in its hello."""
import os
import subprocess

import pytest

from conftest import CUDA_LIBRARY, attnd_bin, child_pids, mapped_libraries, vm_rss_bytes

FRONT_IDLE_RSS_LIMIT = 30 * 1024 * 1024


def test_front_links_no_cuda():
    out = subprocess.run(["ldd", attnd_bin()], capture_output=True, text=True, check=True).stdout
    assert not CUDA_LIBRARY.search(out), out
    worker = os.path.join(os.path.dirname(attnd_bin()), "attnd-worker")
    wout = subprocess.run(["ldd", worker], capture_output=True, text=True, check=True).stdout
    assert "libcublas" in wout and "libcupti" in wout, wout


def test_idle_front_is_small_and_maps_no_cuda(server, api):
    """With one cpu worker, after answering the requests that used to load cuDNN in the front
    (/v1/variants, /v1/device) and a run: ≤ 30 MB resident, no CUDA library mapped."""
    pid = server.proc.pid
    assert api.get("/v1/variants").status_code == 200
    assert api.get("/v1/device").status_code == 200
    r = api.post("/v1/runs", params=dict(backend="reference", device="cpu", batch=1, heads=1, seq_q=8, seq_kv=8,
                                         head_dim=8, dtype="fp32"))
    assert r.status_code == 200, r.text
    rss = vm_rss_bytes(pid)
    print("front VmRSS: %.1f MB" % (rss / 2**20))
    assert rss <= FRONT_IDLE_RSS_LIMIT, "front VmRSS %.1f MB > 30 MB" % (rss / 2**20)
    cuda = sorted(lib for lib in mapped_libraries(pid) if CUDA_LIBRARY.search(lib))
    assert not cuda, "the front maps %s" % cuda


def test_workers_are_attnd_worker(server):
    pid = server.proc.pid
    kids = child_pids(pid)
    exes = [os.readlink("/proc/%d/exe" % k) for k in kids]
    assert exes and all(os.path.basename(e) == "attnd-worker" for e in exes), exes
    assert os.path.dirname(exes[0]) == os.path.dirname(os.path.realpath(attnd_bin()))


def test_cudnn_library_is_the_workers(server, api):
    """The cudnn row's library is what the worker loaded: when it loaded, its file is mapped
    in the cpu worker, not in the front."""
    row = next(v for v in api.get("/v1/variants").json()["variants"] if v["name"] == "cudnn")
    lib = row["library"]
    assert lib is not None and lib["name"] == "cuDNN", row
    if lib["path"] is None:
        pytest.skip("no cuDNN on this machine: %s" % row["why"])
    worker = child_pids(server.proc.pid)[0]
    assert lib["path"] in mapped_libraries(worker)
    assert lib["path"] not in mapped_libraries(server.proc.pid)


def test_worker_refuses_to_run_by_hand():
    worker = os.path.join(os.path.dirname(attnd_bin()), "attnd-worker")
    p = subprocess.run([worker], capture_output=True, text=True)
    assert p.returncode == 2 and "attnd-worker --device DEVICE --ipc-fd N" in p.stderr, p.stderr
    v = subprocess.run([worker, "--version"], capture_output=True, text=True)
    f = subprocess.run([attnd_bin(), "--version"], capture_output=True, text=True)
    assert v.returncode == 0 and v.stdout == f.stdout, (v.stdout, f.stdout)
