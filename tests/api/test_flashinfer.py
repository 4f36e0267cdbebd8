"""The `flashinfer` variant on a server without GPUs and, mostly, without its module: `make
test` never builds libattnd_flashinfer.so (make flashinfer does), so the variant is listed
unavailable with the reason, its limits and its library; runs are refused like any GPU run
(503 no_device, 422 on the cpu device); the setting flashinfer_library names another file,
and a wrong one is reported by name. Stub modules, compiled here from C with the module's
ABI (kernels/flashinfer/flashinfer_abi.h), stand in for the real one: the version and file it
reports, and the refusal of another ABI. Its impls, which name the decode kernel, are the
front's to list and to refuse, module or not. tests/gpu runs the real module.
"""
import json
import os
import re
import shutil
import subprocess

import pytest

from attnd_api_helpers import REPO, Api, AttndServer, attnd_bin, check_against_openapi, error_of

ABI_HEADER = os.path.join(REPO, "kernels", "flashinfer", "flashinfer_abi.h")
with open(ABI_HEADER) as _f:
    ABI = int(re.search(r"#define ATTND_FI_ABI (\d+)", _f.read()).group(1))  # this attnd's interface number


def flashinfer_row(url):
    r = Api(url).get("/v1/variants")
    assert r.status_code == 200, r.text[:500]
    rows = [v for v in r.json()["variants"] if v["name"] == "flashinfer"]
    assert len(rows) == 1, [v["name"] for v in r.json()["variants"]]
    check_against_openapi(rows[0], "Variant")
    return rows[0]


@pytest.fixture
def server_without_module(tmp_path, monkeypatch):
    """A server whose binaries sit in a folder with no lib/: what the default looks for
    (lib/libattnd_flashinfer.so beside attnd-worker) is certainly absent, whatever was built
    into build/test/lib."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    src = os.path.dirname(attnd_bin())
    for exe in ("attnd", "attnd-worker"):
        shutil.copy2(os.path.join(src, exe), bindir / exe)
    monkeypatch.setenv("ATTND_BIN", str(bindir / "attnd"))
    srv = AttndServer(extra=["--cpu-threads", "1"]).start()
    yield srv, bindir
    try:
        srv.stop_checked()
    finally:
        srv.cleanup()


def test_unavailable_without_the_module_and_says_how_to_build_it(server_without_module):
    srv, bindir = server_without_module
    row = flashinfer_row(srv.url)
    expect = str(bindir / "lib" / "libattnd_flashinfer.so")
    assert row["available"] is False, row
    assert row["why"] == "libattnd_flashinfer.so not built: make flashinfer (looked for %s)" % expect, row["why"]
    assert row["library"] == {"name": "FlashInfer", "requested": expect, "version": None, "path": None}, row
    # What it runs, from common/variant_info.c.
    assert row["device"] == "cuda" and row["dtypes"] == ["bf16", "fp16"], row
    assert row["features"] == ["kv_heads", "page_size", "seqlens"] and row["head_dim"] == {"max": 256, "multiple": 64}, row
    assert row["min_compute_capability"] == "8.0", row
    assert [i["name"] for i in row["impls"]] == ["tensor_cores", "cuda_cores"], row["impls"]
    assert "vLLM" in row["summary"] and "SGLang" in row["summary"], row["summary"]


def test_runs_refused_like_any_gpu_run(server_without_module):
    srv, _ = server_without_module
    api = Api(srv.url)
    shape = {"backend": "flashinfer", "batch": 2, "heads": 8, "kv_heads": 2, "seq_q": 1, "seq_kv": 512,
             "head_dim": 128, "dtype": "bf16"}
    r = api.run(shape)
    assert r.status_code == 503 and error_of(r)["code"] == "no_device", r.text
    r = api.run(dict(shape, device="cpu"))
    assert r.status_code == 422 and error_of(r)["code"] == "unsupported", r.text
    assert "needs a GPU" in error_of(r)["message"], r.text
    # The problem's limits come first, whatever the device.
    for bad, needle in (({"head_dim": 96}, "multiple of 64"), ({"head_dim": 192}, "64, 128 and 256"),
                        ({"kv_heads": 3}, "does not divide heads"), ({"dtype": "fp32"}, "dtype fp32"),
                        ({"seq_q": 600, "mask": "causal_bottom_right"}, "seq_q <= seq_kv"),
                        ({"window": 64, "mask": "causal"}, "sliding window")):
        r = api.run(dict(shape, **bad))
        err = error_of(r)
        assert r.status_code in (400, 422) and needle in err["message"], (bad, r.status_code, err)


def test_help_lists_flashinfer_library():
    p = subprocess.run([attnd_bin(), "--help"], cwd=REPO, capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    assert "--flashinfer-library PATH" in p.stdout and "ATTND_FLASHINFER_LIBRARY" in p.stdout, p.stdout[-3000:]


def test_missing_file_named_by_the_setting(start_server, tmp_path):
    missing = str(tmp_path / "nowhere" / "libattnd_flashinfer.so")
    srv = start_server(env={"ATTND_FLASHINFER_LIBRARY": missing})
    row = flashinfer_row(srv.url)
    assert row["available"] is False and row["why"].startswith("flashinfer_library %s: " % missing), row
    assert "No such file" in row["why"], row
    assert row["library"]["requested"] == missing and row["library"]["version"] is None, row
    assert Api(srv.url).get("/readyz").json()["ready"] is True  # the rest of the server is unaffected


def test_text_file_named_by_the_setting(start_server, tmp_path):
    text = tmp_path / "libattnd_flashinfer.so"
    text.write_text("not a shared library\n")
    srv = start_server(extra=["--flashinfer-library", str(text)])
    row = flashinfer_row(srv.url)
    assert row["available"] is False and row["why"].startswith("cannot load %s: " % text), row


STUB = r"""
#include "%(header)s"
int attnd_fi_abi(void) { return %(abi)d; }
const char *attnd_fi_version(void) { return "0.0.0-stub"; }
const char *attnd_fi_build(void) { return "a stub for tests/api/test_flashinfer.py"; }
int attnd_fi_route(const attnd_fi_case *c, char *why, size_t n) { (void)c; (void)why; (void)n; return 0; }
size_t attnd_fi_workspace_bytes(const attnd_fi_case *c) { (void)c; return 0; }
int attnd_fi_prepare(const attnd_fi_case *c, void *w, size_t b, void *s, char *why, size_t n)
{ (void)c; (void)w; (void)b; (void)s; (void)why; (void)n; return -1; }
int attnd_fi_forward(const attnd_fi_case *c, const void *q, const void *k, const void *v, void *o, void *w, void *s,
                     char *why, size_t n)
{ (void)c; (void)q; (void)k; (void)v; (void)o; (void)w; (void)s; (void)why; (void)n; return -1; }
const char *attnd_fi_describe(const attnd_fi_case *c) { (void)c; return ""; }
"""


def build_stub(tmp_path, abi):
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build a stub module")
    src, lib = tmp_path / "stub.c", tmp_path / ("libstub%d.so" % abi)
    src.write_text(STUB % {"header": ABI_HEADER, "abi": abi})
    p = subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return lib


def test_stub_module_is_loaded_and_reported(start_server, tmp_path):
    """A module that loads: its version and file are in `library`; what keeps the variant
    unavailable here is the missing GPU, not the module."""
    lib = build_stub(tmp_path, abi=ABI)
    srv = start_server(env={"ATTND_FLASHINFER_LIBRARY": str(lib)})
    row = flashinfer_row(srv.url)
    assert row["library"] == {"name": "FlashInfer", "requested": str(lib), "version": "0.0.0-stub",
                              "path": os.path.realpath(lib)}, row
    assert row["available"] is False and row["why"] == "no GPU device is up on this server", row


def test_module_of_another_abi_is_refused(start_server, tmp_path):
    lib = build_stub(tmp_path, abi=99)
    srv = start_server(extra=["--flashinfer-library", str(lib)])
    row = flashinfer_row(srv.url)
    assert row["available"] is False, row
    assert row["why"] == "%s speaks ABI 99; this attnd needs ABI %d: rebuild it (make flashinfer)" % (lib, ABI), row
    old = build_stub(tmp_path, abi=ABI - 1)  # a module built before paged and ragged batches
    srv = start_server(extra=["--flashinfer-library", str(old)])
    assert "speaks ABI %d; this attnd needs ABI %d" % (ABI - 1, ABI) in flashinfer_row(srv.url)["why"]


def test_the_session_servers_row(server):
    """The default: built into build/test/lib (make flashinfer) or not; either way the row
    says which."""
    row = flashinfer_row(server.url)
    lib = row["library"]
    assert lib["name"] == "FlashInfer" and lib["requested"].endswith("/lib/libattnd_flashinfer.so"), lib
    if lib["version"] is None:
        assert row["why"].startswith("libattnd_flashinfer.so not built: make flashinfer"), row
    else:
        assert os.path.isabs(lib["path"]) and os.path.exists(lib["path"]), lib
        assert row["why"] == "no GPU device is up on this server", row


def test_device_lists_flashinfer_beside_cudnn(server_without_module):
    """GET /v1/device: a GPU's object names FlashInfer's version (`flashinfer`) beside cuDNN's,
    null where the module does not load. Documented in the Device schema; every device this
    server lists conforms, and a GPU listed without the module says null (this machine lists
    none: tests/gpu/test_flashinfer_serving.py checks a GPU's against the module's version)."""
    srv, _ = server_without_module
    with open(os.path.join(REPO, "docs", "openapi.json")) as f:
        props = json.load(f)["components"]["schemas"]["Device"]["properties"]
    for key in ("cudnn", "flashinfer"):
        assert props[key].get("nullable") is True and props[key]["type"] == "string", props[key]
    devs = Api(srv.url).get("/v1/device").json()["devices"]
    for d in devs:
        check_against_openapi(d, "Device")
        if d["id"].startswith("cuda") and d.get("state") == "up":
            assert "flashinfer" in d and d["flashinfer"] is None, d


DECODE = {"backend": "flashinfer", "batch": 2, "heads": 8, "kv_heads": 2, "seq_q": 1, "seq_kv": 512, "head_dim": 128,
          "dtype": "bf16"}


def test_impls_listed_with_what_they_run(server_without_module):
    """tensor_cores first (the default: vLLM's decode at every group), then cuda_cores (SGLang's
    up to 4 query heads per K/V head, and the groups it is compiled for); no device runs either
    on this server."""
    srv, _ = server_without_module
    impls = flashinfer_row(srv.url)["impls"]
    assert [i["name"] for i in impls] == ["tensor_cores", "cuda_cores"], impls
    tc, cc = impls
    assert "vLLM" in tc["summary"] and "default" in tc["summary"] and "use_tensor_cores=True" in tc["summary"], tc
    assert "SGLang" in cc["summary"] and "1, 2, 3, 4, 6, 8 and 16" in cc["summary"], cc
    assert all(i["devices"] == [] and i["needs"] is None for i in impls), impls


@pytest.mark.parametrize("impl", ["tensor_cores", "cuda_cores"])
@pytest.mark.parametrize("shape", [dict(seq_q=64), dict(seq_q=7, seq_kv=512, mask="causal_bottom_right"),
                                   dict(seqlens_q=[3, 1], seqlens_kv=[40, 9])],
                         ids=["prefill", "chunked_prefill", "ragged_prefill"])
def test_impl_on_a_prefill_is_refused_before_any_device(server_without_module, impl, shape):
    """The impls choose the decode kernel: a prefill naming one is 422 unsupported on seq_q,
    before a device is chosen (the same prefill without impl reaches the no-GPU refusal)."""
    srv, _ = server_without_module
    api = Api(srv.url)
    body = dict(DECODE, **shape)
    if "seqlens_q" in body:
        for key in ("batch", "seq_q", "seq_kv"):
            body.pop(key)
    r = api.run(body=dict(body, impl=impl))
    err = error_of(r)
    assert r.status_code == 422 and err["code"] == "unsupported" and err["field"] == "seq_q", (r.status_code, err)
    assert "impl %s chooses the decode kernel" % impl in err["message"] and "seq_q 1 only" in err["message"], err
    r = api.run(body=body)
    assert r.status_code == 503 and error_of(r)["code"] == "no_device", r.text


@pytest.mark.parametrize("heads,kv_heads", [(10, 2), (40, 8), (64, 2)])
def test_cuda_cores_refuses_a_group_its_kernel_lacks(server_without_module, heads, kv_heads):
    """FlashInfer's CUDA-core decode is compiled for groups 1, 2, 3, 4, 6, 8 and 16: another is
    422 naming them; tensor_cores runs it (503 here: no GPU)."""
    srv, _ = server_without_module
    api = Api(srv.url)
    body = dict(DECODE, heads=heads, kv_heads=kv_heads)
    r = api.run(body=dict(body, impl="cuda_cores"))
    err = error_of(r)
    assert r.status_code == 422 and err["code"] == "unsupported" and err["field"] == "kv_heads", (r.status_code, err)
    assert "1, 2, 3, 4, 6, 8 and 16" in err["message"] and "not %d" % (heads // kv_heads) in err["message"], err
    for impl in ("tensor_cores", None):
        r = api.run(body=dict(body, impl=impl) if impl else body)
        assert r.status_code == 503 and error_of(r)["code"] == "no_device", (impl, r.text)


@pytest.mark.parametrize("impl", ["tensor_cores", "cuda_cores"])
@pytest.mark.parametrize("layout", [dict(), dict(page_size=16, num_pages=80), dict(seqlens_kv=[40, 9, 300])],
                         ids=["dense", "paged", "ragged"])
def test_impl_on_a_decode_is_a_gpu_run(server_without_module, impl, layout):
    """Within its limits a decode naming either impl takes the path of any GPU run: 503 here."""
    srv, _ = server_without_module
    body = dict(DECODE, **layout)
    if "seqlens_kv" in body:
        for key in ("batch", "seq_kv"):
            body.pop(key)
    r = Api(srv.url).run(body=dict(body, impl=impl))
    assert r.status_code == 503 and error_of(r)["code"] == "no_device", r.text


def test_unknown_impl_names_the_two(server_without_module):
    srv, _ = server_without_module
    r = Api(srv.url).run(body=dict(DECODE, impl="tensor_core"))
    err = error_of(r)
    assert r.status_code == 400 and err["code"] == "bad_value" and err["field"] == "impl", err
    assert "tensor_cores, cuda_cores" in err["message"], err
