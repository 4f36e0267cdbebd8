"""The two programs on a GPU machine: the front maps no CUDA library and stays small while its
GPU worker holds the CUDA context, cuBLAS and cuDNN (docs/architecture.md)."""

import pytest

from attnd_api_helpers import CUDA_LIBRARY, child_pids, mapped_libraries, vm_rss_bytes
from attnd_gpu_helpers import fact



def test_front_small_gpu_worker_holds_cuda(gapi, front_pid):
    if front_pid is None:
        pytest.skip("ATTND_URL without ATTND_PID: the front is not a process of this machine")
    r = gapi.run_ok(backend="cudnn", batch=1, heads=2, seq_q=256, seq_kv=256, head_dim=64, dtype="bf16",
                    max_iters=20)
    assert r["status"] == "done"
    front_mb = vm_rss_bytes(front_pid) / 2**20
    fact("front_rss_mb_with_gpu_worker", round(front_mb, 1))
    assert front_mb <= 30, "front VmRSS %.1f MB" % front_mb
    assert not [lib for lib in mapped_libraries(front_pid) if CUDA_LIBRARY.search(lib)], "the front maps a CUDA library"
    devices_seen = set()
    for pid in child_pids(front_pid):
        with open("/proc/%d/cmdline" % pid) as f:
            argv = f.read().split("\0")
        device = argv[argv.index("--device") + 1]
        devices_seen.add(device)
        fact("worker_rss_mb_%s" % device, round(vm_rss_bytes(pid) / 2**20, 1))
        if device.startswith("cuda:"):
            assert any("libcudnn" in lib for lib in mapped_libraries(pid)), "the worker that ran cudnn maps no libcudnn"
    assert "cpu" in devices_seen and "cuda:0" in devices_seen, devices_seen
