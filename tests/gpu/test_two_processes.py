"""The two programs on a GPU machine: the front maps no CUDA library and stays small while its
GPU worker holds the CUDA context, cuBLAS and cuDNN (docs/architecture.md)."""
import os
import re

import pytest

from conftest import fact

CUDA_LIBS = re.compile(r"lib(cuda|cudart|cublas|cublasLt|cupti|cudnn\w*|nvidia-ml|nvrtc)\.so")


def vm_rss_mb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise AssertionError("no VmRSS in /proc/%d/status" % pid)


def mapped(pid):
    with open("/proc/%d/maps" % pid) as f:
        return {line.split()[-1] for line in f if ".so" in line}


def workers(front):
    kids = []
    for task in os.listdir("/proc/%d/task" % front):
        with open("/proc/%d/task/%s/children" % (front, task)) as f:
            kids += [int(k) for k in f.read().split()]
    return kids


def test_front_small_gpu_worker_holds_cuda(gapi, front_pid):
    if front_pid is None:
        pytest.skip("ATTND_URL without ATTND_PID: the front is not a process of this machine")
    r = gapi.run_ok(backend="cudnn", batch=1, heads=2, seq_q=256, seq_kv=256, head_dim=64, dtype="bf16",
                    max_iters=20)
    assert r["status"] == "done"
    front_mb = vm_rss_mb(front_pid)
    fact("front_rss_mb_with_gpu_worker", round(front_mb, 1))
    assert front_mb <= 30, "front VmRSS %.1f MB" % front_mb
    assert not [lib for lib in mapped(front_pid) if CUDA_LIBS.search(lib)], "the front maps a CUDA library"
    gpu_worker_seen = False
    for pid in workers(front_pid):
        libs = mapped(pid)
        name = "cpu" if not any("libcuda.so" in lib for lib in libs) else "gpu"
        fact("worker_rss_mb_%s_%d" % (name, pid), round(vm_rss_mb(pid), 1))
        if name == "gpu":
            gpu_worker_seen = True
            assert any("libcudnn" in lib for lib in libs), "the GPU worker that ran cudnn maps no libcudnn"
    assert gpu_worker_seen, "no worker maps libcuda.so"
