"""bench/isolated_windows.py's reading of fused_check: scripts/gpu-session.sh's A/B and targets tables
come from it, so a row it cannot read must say why instead of printing an empty cell."""
import importlib.util
import os
import subprocess

from attnd_api_helpers import REPO

spec = importlib.util.spec_from_file_location("isolated_windows", os.path.join(REPO, "bench", "isolated_windows.py"))
isolated_windows = importlib.util.module_from_spec(spec)
spec.loader.exec_module(isolated_windows)

# fused_check's timing table as tests/gpu/fused_check.cu prints it (its printf, a range with an en dash)
FUSED_CHECK_OUT = """| B | H | S | D | mask | variant | gpu us | range us | TFLOP/s |
|---|---|---|---|---|---|---|---|---|
| 2 | 64/8 | 8192 | 128 | causal | flash | 1804.2 | 1801.0–1810.3 | 609.5 |
| 2 | 64/8 | 8192 | 128 | causal | cudnn | 1950.7 | 1949.9–1952.2 | 563.7 |
"""


def test_each_rows_time_is_read():
    assert isolated_windows.fused_check_us(FUSED_CHECK_OUT, "flash") == 1804.2
    assert isolated_windows.fused_check_us(FUSED_CHECK_OUT, "cudnn") == 1950.7
    assert isolated_windows.fused_check_us(FUSED_CHECK_OUT, "flash@tma") is None


def test_a_missing_row_says_why():
    out = subprocess.CompletedProcess([], 0, stdout=FUSED_CHECK_OUT.replace("cudnn", "xx"), stderr="")
    why = isolated_windows.why_no_row(out, "cudnn", cudnn_given=False)
    assert "no cudnn row" in why and "no --cudnn given" in why, why
    failed = subprocess.CompletedProcess([], 1, stdout="", stderr="--cudnn /x: libcudnn.so.9 not found\n")
    why = isolated_windows.why_no_row(failed, "cudnn", cudnn_given=True)
    assert "libcudnn.so.9 not found" in why and "no --cudnn given" not in why, why
