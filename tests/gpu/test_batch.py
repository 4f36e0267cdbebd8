"""`attnd batch` on the GPU: the study's shape through every GPU variant, as a CI job runner
would run it (docs/plan.md). Every line is a done record that verified against the reference,
with its kernels measured; the results stay in $OUT/batch-results.jsonl for bench/results.

cuDNN for the cudnn variant: PyTorch's wheel when it is importable (as bench/run.sh does),
else the dynamic loader's search; without either, cudnn is left out of the plan and the test
says so in its facts."""
import json
import os
import subprocess
import tempfile

from attnd_api_helpers import REPO, attnd_bin
from attnd_gpu_helpers import fact

PLAN_TIMEOUT_S = 240


def torch_cudnn_dir():
    try:
        import nvidia.cudnn  # PyTorch's cuDNN wheel
    except ImportError:
        return None
    d = os.path.join(list(nvidia.cudnn.__path__)[0], "lib")
    return d if os.path.isdir(d) else None


def test_batch_runs_the_study_plan_on_the_gpu():
    cudnn = torch_cudnn_dir()
    backends = ["naive", "naive_inplace", "math", "efficient", "flash"] + (["cudnn"] if cudnn else [])
    plan = {"backends": backends, "batch": [8], "heads": [16], "seq": [1024], "head_dim": [64], "dtype": ["bf16"],
            "params": {"causal": True, "verify": True, "device": "cuda:0"}}
    work = tempfile.mkdtemp(prefix="attnd-batch-gpu-")
    plan_path = os.path.join(work, "plan.json")
    with open(plan_path, "w") as f:
        json.dump(plan, f)
    out = os.path.join(os.environ.get("OUT", work), "batch-results.jsonl")
    argv = [attnd_bin(), "batch", plan_path, "--out", out, "--data-dir", os.path.join(work, "data"),
            "--log-level", "warn", "--node", "h200-batch"]
    if cudnn:
        argv += ["--cudnn-library", cudnn]
    p = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=PLAN_TIMEOUT_S)
    assert p.returncode == 0, "exit %d\n%s" % (p.returncode, p.stderr[-3000:])
    assert p.stdout == "", "with --out, stdout stays empty"
    assert "eta" in p.stderr
    with open(out) as f:
        lines = [json.loads(line) for line in f if line.strip()]
    assert [r["backend"] for r in lines] == backends
    for r in lines:
        assert r["status"] == "done", r.get("error")
        assert r["node"] == "h200-batch" and r["device"]["id"] == "cuda:0"
        assert r["verify"]["pass"] is True, (r["backend"], r["verify"])
        assert r["timing"]["median_us"] > 0 and r["kernels"]["per_forward"] >= 1, r["backend"]
        fact("batch_%s_median_us" % r["backend"], r["timing"]["median_us"])
    fact("batch_cudnn_included", bool(cudnn))
