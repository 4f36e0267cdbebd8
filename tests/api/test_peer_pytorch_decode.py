"""bench/peer_pytorch.py --decode, the PyTorch side of a GPU call's decode comparison: its shapes
are parsed and refused before torch is imported, so this machine (no torch, no GPU) checks them."""
import os
import subprocess
import sys

from attnd_api_helpers import REPO

sys.path.insert(0, os.path.join(REPO, "bench"))
from peer_pytorch import parse_decode  # noqa: E402


def test_decode_shape_parsed():
    assert parse_decode("64,32,8,4,8192,128,causal_bottom_right") == dict(
        batch=64, heads=32, kv_heads=8, seq_q=4, seq_kv=8192, head_dim=128, mask="causal_bottom_right")
    assert parse_decode("8,64,8,1,32768,128")["mask"] == "none"


def test_decode_shape_refused_before_torch():
    for bad in ("1,2,3,1,8,64", "1,4,2,1,8,64,causal", "1,4,2,1,8", "1,4,0,1,8,64"):
        p = subprocess.run([sys.executable, os.path.join(REPO, "bench", "peer_pytorch.py"), "--decode", bad],
                           capture_output=True, text=True, timeout=60)
        assert p.returncode == 2 and "decode shape" in p.stderr, (bad, p.stderr)
