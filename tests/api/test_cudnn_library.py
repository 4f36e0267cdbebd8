"""The setting cudnn_library (ATTND_CUDNN_LIBRARY, --cudnn-library, config key): which
cuDNN the `cudnn` variant loads, and what GET /v1/variants says about it.

A wrong choice never stops the server: the variant is listed unavailable with a reason that
names the setting's value. Without a GPU the variant is unavailable anyway; with a real
cuDNN chosen, the reason is the missing GPU and `library` shows the version and the file
loaded (cases needing a real cuDNN skip where the machine has none).
"""
import json
import os
import subprocess

import pytest

from attnd_api_helpers import REPO, Api, attnd_bin


def cudnn_row(url):
    api = Api(url)
    r = api.get("/v1/variants")
    assert r.status_code == 200, r.text[:500]
    rows = [v for v in r.json()["variants"] if v["name"] == "cudnn"]
    assert len(rows) == 1, r.text[:500]
    return rows[0]


def assert_refused(row, value, needle):
    assert row["available"] is False, row
    assert value in row["why"], "the reason must name the setting's value %r: %s" % (value, row["why"])
    assert needle in row["why"], "the reason must say %r: %s" % (needle, row["why"])
    lib = row["library"]
    assert lib["name"] == "cuDNN" and lib["requested"] == value, lib
    assert lib["version"] is None and lib["path"] is None, lib


def test_help_lists_cudnn_library():
    p = subprocess.run([attnd_bin(), "--help"], cwd=REPO, capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    assert "--cudnn-library PATH" in p.stdout and "ATTND_CUDNN_LIBRARY" in p.stdout, p.stdout[-2000:]
    assert 'key "cudnn_library", default ""' in p.stdout


def test_variants_show_the_library(api):
    """Every variant has `library`; only cudnn and flashinfer (attnd's FlashInfer module:
    test_flashinfer.py) open one."""
    vs = api.get("/v1/variants").json()["variants"]
    for v in vs:
        assert "library" in v, v["name"]
        if v["name"] not in ("cudnn", "flashinfer"):
            assert v["library"] is None, v
    row = [v for v in vs if v["name"] == "cudnn"][0]
    lib = row["library"]
    assert lib["name"] == "cuDNN" and lib["requested"] == "libcudnn.so.9", lib
    if lib["version"] is not None:
        assert lib["version"].startswith("9."), lib
        assert os.path.isabs(lib["path"]) and os.path.exists(lib["path"]), lib
    else:
        assert lib["path"] is None and "libcudnn.so.9" in row["why"], row


def test_empty_directory_by_environment(start_server, tmp_path):
    empty = tmp_path / "no-cudnn-here"
    empty.mkdir()
    srv = start_server(env={"ATTND_CUDNN_LIBRARY": str(empty)})
    assert_refused(cudnn_row(srv.url), str(empty), "libcudnn.so.9")
    # The rest of the server is unaffected.
    assert Api(srv.url).get("/readyz").json()["ready"] is True


def test_non_library_file_by_flag(start_server, tmp_path):
    text = tmp_path / "libcudnn.so.9"
    text.write_text("not a shared library\n")
    srv = start_server(extra=["--cudnn-library", str(text)])
    assert_refused(cudnn_row(srv.url), str(text), "not a shared library")


def test_missing_path_by_config_file(start_server, tmp_path):
    missing = str(tmp_path / "nowhere" / "lib")
    cfg = tmp_path / "attnd.json"
    cfg.write_text(json.dumps({"cudnn_library": missing}))
    srv = start_server(extra=["--config", str(cfg)])
    assert_refused(cudnn_row(srv.url), missing, "No such file")


@pytest.fixture(scope="module")
def real_cudnn_dir(server):
    """The directory of the cuDNN the loader's search finds (the session server's), or skip."""
    lib = cudnn_row(server.url)["library"]
    if not lib["path"]:
        pytest.skip("no cuDNN on this machine")
    return os.path.dirname(lib["path"]), lib


def test_real_cudnn_directory(start_server, real_cudnn_dir):
    d, default = real_cudnn_dir
    srv = start_server(env={"ATTND_CUDNN_LIBRARY": d})
    row = cudnn_row(srv.url)
    lib = row["library"]
    assert lib["requested"] == d and lib["version"] == default["version"] and lib["path"] == default["path"], lib
    # Loaded: what keeps it unavailable here is the missing GPU, not cuDNN.
    assert row["available"] is False and "cudnn_library" not in row["why"] and "GPU" in row["why"], row


def test_directory_without_graph_library(start_server, real_cudnn_dir, tmp_path):
    """libcudnn.so.9 alone is a front: without libcudnn_graph.so.9 beside it, refused by name."""
    d, _ = real_cudnn_dir
    links = tmp_path / "front-only"
    links.mkdir()
    (links / "libcudnn.so.9").symlink_to(os.path.join(d, "libcudnn.so.9"))
    srv = start_server(extra=["--cudnn-library", str(links)])
    assert_refused(cudnn_row(srv.url), str(links), "libcudnn_graph.so.9")
