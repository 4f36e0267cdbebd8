"""How often NVML's energy counter moves, measured: the basis of attnd's 200 ms minimum span
between counter steps for energy (docs/measurement.md, "Energy").

Reads nvmlDeviceGetTotalEnergyConsumption in a tight loop for a few seconds while the GPU
runs bf16 matmuls (PyTorch), and prints the intervals between changes of the counter and
the energy per step, as one JSON line.

    python3 bench/nvml_energy_probe.py [seconds]
"""
import ctypes
import json
import statistics
import sys
import threading
import time


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 3.0
    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    assert nvml.nvmlInit_v2() == 0
    dev = ctypes.c_void_p()
    assert nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(dev)) == 0
    mj = ctypes.c_ulonglong()

    import torch

    stop = threading.Event()

    def load():
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        while not stop.is_set():
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()

    t = threading.Thread(target=load)
    t.start()
    time.sleep(0.5)
    changes, last, t_end = [], None, time.monotonic() + seconds
    reads = 0
    while time.monotonic() < t_end:
        assert nvml.nvmlDeviceGetTotalEnergyConsumption(dev, ctypes.byref(mj)) == 0
        reads += 1
        now = time.monotonic()
        if last is None or mj.value != last[1]:
            changes.append((now, mj.value))
            last = (now, mj.value)
    stop.set()
    t.join()
    gaps_ms = [(b[0] - a[0]) * 1e3 for a, b in zip(changes, changes[1:])]
    steps_mj = [b[1] - a[1] for a, b in zip(changes, changes[1:])]
    print(json.dumps({
        "reads": reads, "changes": len(changes),
        "update_interval_ms": {"median": statistics.median(gaps_ms), "min": min(gaps_ms), "max": max(gaps_ms)},
        "step_mj": {"median": statistics.median(steps_mj), "min": min(steps_mj), "max": max(steps_mj)},
        "avg_power_w": (changes[-1][1] - changes[0][1]) / (changes[-1][0] - changes[0][0]) / 1e3,
    }))


if __name__ == "__main__":
    main()
