"""The Python client (clients/python: attnd.Client, attnd-cli) against a real attnd on the
cpu device (backend reference).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from attnd_api_helpers import REPO, tiny

sys.path.insert(0, os.path.join(REPO, "clients", "python"))
import attnd  # noqa: E402
from attnd import cli  # noqa: E402

TINY_CLI = ["--device", "cpu", "--batch", "1", "--heads", "1", "--head-dim", "8", "--iters", "1", "--warmup", "0",
            "--profile", "false"]


@pytest.fixture(scope="module")
def client(server):
    return attnd.Client(server.url, timeout=90)


def test_health_ready_device_variants(client):
    assert client.health() == {"status": "ok"}
    assert client.ready() is True
    devs = client.device()["devices"]
    assert any(d["id"] == "cpu" for d in devs)
    names = [v["name"] for v in client.variants()["variants"]]
    assert "reference" in names


def test_run_and_get(client):
    rec = client.run(**tiny())
    assert rec["status"] == "done" and isinstance(rec["id"], int)
    assert rec["params"]["backend"] == "reference"
    assert client.get_run(rec["id"]) == rec


def test_numpy_scalars_are_parameters(client):
    """A sweep over np.arange hands the client numpy integers: they run like Python's."""
    rec = client.run(**tiny(seed=np.int64(3), seq=np.int64(16), head_dim=np.int32(8), verify=np.bool_(True)))
    assert rec["status"] == "done" and rec["params"]["seq_q"] == 16 and rec["params"]["verify"] is True


def test_refusal_raises_with_server_fields(client):
    with pytest.raises(attnd.AttndError) as ei:
        client.run(**tiny(batch=0))
    e = ei.value
    assert (e.status, e.code, e.field) == (400, "out_of_range", "batch")
    assert "batch" in e.message and "batch" in str(e)
    with pytest.raises(attnd.AttndError) as ei:
        client.run(backend="no_such_backend")
    assert ei.value.code == "unknown_backend" and ei.value.field == "backend"
    with pytest.raises(attnd.AttndError) as ei:
        client.get_run(10 ** 9)
    assert ei.value.status == 404 and ei.value.code == "not_found"


def test_connection_error_is_an_attnd_error():
    c = attnd.Client("http://127.0.0.1:9", timeout=2)
    with pytest.raises(attnd.AttndError) as ei:
        c.health()
    assert ei.value.status == 0 and ei.value.code in ("connection_error", "timeout")


def test_failed_run_raises_with_record(start_server):
    srv = start_server(extra=["--enable-fault-injection", "true", "--cpu-threads", "2"])
    c = attnd.Client(srv.url, timeout=60)
    with pytest.raises(attnd.AttndError) as ei:
        c.run(**tiny(fault="crash"))
    e = ei.value
    assert e.status == 500 and e.code == "worker_crashed" and e.record["status"] == "failed"
    rec = c.run(check=False, **tiny(fault="crash"))
    assert rec["status"] == "failed"
    assert c.get_run(rec["id"]) == rec  # a stored failure does not raise on GET


def test_token(start_server):
    d = tempfile.mkdtemp(prefix="attnd-tok-")
    try:
        path = os.path.join(d, "tokens")
        with open(path, "w") as f:
            f.write("client-secret\n")
        srv = start_server(extra=["--token-file", path, "--cpu-threads", "2"])
        with pytest.raises(attnd.AttndError) as ei:
            attnd.Client(srv.url).device()
        assert ei.value.status == 401 and ei.value.code == "unauthorized"
        c = attnd.Client(srv.url, token="client-secret", timeout=60)
        assert c.device()["devices"]
        assert c.run(**tiny())["status"] == "done"
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_runs_listing_and_follow(client):
    a = client.run(**tiny(seed=11))
    b = client.run(**tiny(seed=12))
    page = client.runs(after=a["id"] - 1, limit=1)
    assert isinstance(page.get("runs"), list) and len(page["runs"]) == 1
    assert page["runs"][0]["id"] == a["id"]
    assert "next_after" in page
    seen = [r["id"] for r in client.iter_runs(after=a["id"] - 1, limit=1)]
    assert seen[:2] == [a["id"], b["id"]]
    assert len(seen) == len(set(seen))


def test_async_submit_and_wait(client):
    job = client.submit(**tiny(seed=21))
    assert isinstance(job["id"], int)
    rec = client.wait(job["id"], timeout=90)
    assert rec["status"] == "done" and rec["id"] == job["id"]


def test_upload_download_roundtrip(client):
    x = (np.arange(1 * 2 * 8 * 8, dtype=np.float32).reshape(1, 2, 8, 8) / 7.0).astype(np.float32)
    t = client.upload(x, name="q", device="cpu")
    assert isinstance(t["id"], (int, str)) and t["name"] == "q"  # docs/tensors.md: "t1"
    assert list(t["shape"]) == [1, 2, 8, 8] and t["dtype"] == "fp32"
    y = client.download(t["id"])
    assert y.dtype == x.dtype and y.shape == x.shape
    assert y.tobytes() == x.tobytes()
    # fp16, and a run on uploaded q, k, v whose kept output comes back as numpy
    q = (np.random.default_rng(1).standard_normal((1, 2, 8, 8)) * 0.5).astype(np.float16)
    ids = {n: client.upload(q, name=n, device="cpu")["id"] for n in ("q", "k", "v")}
    rec = client.run(backend="reference", device="cpu", iters=1, warmup=0, keep_output=True, **ids)
    out_id = rec["output"].get("tensor")
    assert out_id
    out = client.download(out_id)
    assert out.shape == (1, 2, 8, 8) and out.dtype == np.float16
    assert np.all(np.isfinite(out.astype(np.float32)))
    with pytest.raises(attnd.AttndError) as ei:
        client.download(999999 if isinstance(t["id"], int) else "t999999")
    assert ei.value.status in (404, 410)


def test_cli_run_json_and_table(server, capsys):
    rc = cli.main(["run", "--url", server.url, "--backend", "reference", "--seq", "8", "--json"] + TINY_CLI)
    out = capsys.readouterr().out
    assert rc == 0
    rec = json.loads(out)
    assert rec["status"] == "done" and rec["params"]["seq_q"] == 8
    rc = cli.main(["run", "--url", server.url, "--backend", "reference", "--seq", "8"] + TINY_CLI)
    out = capsys.readouterr().out
    assert rc == 0 and "median_us" in out.splitlines()[0] and "reference" in out


def test_cli_serving_flags_run_a_paged_ragged_decode(server, capsys):
    """--page-size, --num-pages and --seqlens-kv reach the server as parameters; the record keeps
    them and the table shows the layout."""
    flags = ["--url", server.url, "--backend", "reference"] + TINY_CLI + [
        "--batch", "3", "--heads", "4", "--kv-heads", "2", "--seq-q", "1", "--seq-kv", "9", "--mask",
        "causal_bottom_right", "--page-size", "4", "--num-pages", "8", "--seqlens-kv", "5,0,9"]
    assert cli.main(["run"] + flags + ["--json"]) == 0
    rec = json.loads(capsys.readouterr().out)
    assert rec["status"] == "done", rec
    assert (rec["params"]["page_size"], rec["params"]["num_pages"], rec["params"]["seqlens_kv"]) == (4, 8, [5, 0, 9])
    assert cli.main(["run"] + flags) == 0
    table = capsys.readouterr().out.splitlines()
    assert "page_size" in table[0] and "seqlens" in table[0] and "kv 5,0,9" in table[1], table
    flags[flags.index("5,0,9")] = "uniform:1:9"
    assert cli.main(["run"] + flags + ["--json"]) == 0
    assert json.loads(capsys.readouterr().out)["params"]["seqlens_kv"] == {"dist": "uniform", "min": 1, "max": 9}


def test_cli_models_and_a_run_from_a_preset(server, client, capsys):
    """`attnd-cli models` prints the presets; `run --model` takes one, a flag overrides a field,
    and the table shows the grouped K/V heads and the window."""
    models = client.models()
    assert len(models) >= 9 and all(m["source"].startswith("https://") for m in models)
    rc = cli.main(["models", "--url", server.url])
    out = capsys.readouterr().out
    assert rc == 0 and out.splitlines()[0].split()[:4] == ["name", "heads", "kv_heads", "head_dim"], out
    assert all(m["name"] in out for m in models)
    mistral = next(m for m in models if m.get("window") is not None and m["kv_heads"] < m["heads"])
    args = ["run", "--url", server.url, "--backend", "reference", "--seq", "8", "--model", mistral["name"],
            "--device", "cpu", "--batch", "1", "--head-dim", "8", "--iters", "1", "--warmup", "0"]
    rc = cli.main(args + ["--json"])
    rec = json.loads(capsys.readouterr().out)
    assert rc == 0 and rec["model"]["name"] == mistral["name"] and rec["model"]["overridden"] == ["head_dim"]
    assert (rec["params"]["kv_heads"], rec["params"]["window"]) == (mistral["kv_heads"], mistral["window"])
    rc = cli.main(args + ["--kv-heads", "1", "--window", "3"])
    head, row = capsys.readouterr().out.splitlines()[:2]
    cols = dict(zip(head.split(), row.split()))
    assert rc == 0 and cols["kv_heads"] == "1" and cols["window"] == "3", (head, row)


def test_cli_sweep_csv_json(server, capsys, tmp_path):
    csv_path, json_path = tmp_path / "out.csv", tmp_path / "out.json"
    rc = cli.main(["sweep", "--url", server.url, "--backends", "reference,naive", "--seq", "8,16",
                   "--csv", str(csv_path), "--json", str(json_path)] + TINY_CLI)
    cap = capsys.readouterr()
    assert rc == 1  # naive needs a GPU: refused on the cpu device, and the exit says so
    lines = cap.out.strip().splitlines()
    assert len(lines) == 5 and lines[0].startswith("id")
    assert sum("done" in l for l in lines) == 2 and sum("refused" in l for l in lines) == 2
    assert "4/4" in cap.err  # the progress bar
    rows = csv_path.read_text().strip().splitlines()
    assert len(rows) == 5 and rows[0].startswith("id,backend")
    data = json.loads(json_path.read_text())
    assert len(data) == 4
    assert data[0]["record"]["status"] == "done"
    assert data[2]["error"]["code"] == "unsupported"


def test_cli_sweep_plan_with_a_fraction_for_iters_is_refused_before_any_run(server, capsys, tmp_path):
    """A plan's params of the wrong type (here "iters": 1.0) are refused whole with exit 2, as
    attnd batch refuses them, checked against the server's own RunParams schema: no run is
    posted, so none fails one by one."""
    client = attnd.Client(server.url)
    before = len(client.runs(limit=1000)["runs"])
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"backends": ["reference"], "seq": [8, 16],
                                "params": {"device": "cpu", "batch": 1, "heads": 2, "head_dim": 8, "iters": 1.0}}))
    rc = cli.main(["sweep", "--url", server.url, "--plan", str(plan)])
    assert rc == 2 and "params.iters: iters must be an integer" in capsys.readouterr().err
    assert len(client.runs(limit=1000)["runs"]) == before


def test_cli_bad_server_exit_1(capsys):
    rc = cli.main(["device", "--url", "http://127.0.0.1:9", "--timeout", "2"])
    assert rc == 1 and "attnd-cli:" in capsys.readouterr().err


def test_pip_install_and_console_script(server, tmp_path):
    """pip install of the client's folder (a copy, as it is in git), offline, into a venv that
    sees this Python's packages; the folder is left as it was (no build/, no egg-info); then
    the attnd-cli entry point."""
    src = tmp_path / "src"
    shutil.copytree(os.path.join(REPO, "clients", "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    before = sorted(str(p.relative_to(src)) for p in src.rglob("*") if "__pycache__" not in p.parts)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True, timeout=120)
    pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-build-isolation",
                          "--no-deps", str(src)], capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr[-3000:]
    after = sorted(str(p.relative_to(src)) for p in src.rglob("*") if "__pycache__" not in p.parts)
    assert after == before, "pip install wrote into the source folder: %s" % sorted(set(after) - set(before))
    r = subprocess.run([str(venv / "bin" / "attnd-cli"), "run", "--url", server.url, "--backend", "reference",
                        "--seq", "8", "--json"] + TINY_CLI, capture_output=True, text=True, timeout=120,
                       cwd=str(tmp_path))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["status"] == "done"
    r = subprocess.run([str(venv / "bin" / "python"), "-c", "import attnd, attnd_ref; print(attnd.__file__)"],
                       capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert r.returncode == 0 and str(venv) in r.stdout, r.stdout + r.stderr


def test_curl_scripts(server):
    """clients/curl/*.sh against the server (the GPU runs answer 503 here: no GPU)."""
    import shutil as _sh
    if not _sh.which("curl"):
        pytest.skip("curl is not installed")
    d = os.path.join(REPO, "clients", "curl")
    env = dict(os.environ, ATTND_URL=server.url)
    env.pop("ATTND_TOKEN", None)

    def sh(*argv):
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=120, env=env)

    for name in ("health.sh", "device.sh", "variants.sh"):
        r = sh(os.path.join(d, name))
        assert r.returncode == 0, (name, r.stderr)
    r = sh(os.path.join(d, "run-reference-cpu.sh"))
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["status"] == "done"
    r = sh(os.path.join(d, "get-run.sh"), str(rec["id"]))
    assert r.returncode == 0 and json.loads(r.stdout) == rec
    r = sh(os.path.join(d, "run-naive-math.sh"))
    assert r.returncode != 0 and "no_device" in r.stdout
    assert sh(os.path.join(d, "get-run.sh")).returncode == 2


class _FakeTorchTensor:
    """Duck-types the bits of torch.Tensor the client uses (torch is not a test dependency)."""

    def __init__(self, arr):
        self.arr = arr
        self.dtype = "torch.float16"

    def detach(self):
        return self

    def cpu(self):
        return self

    def contiguous(self):
        return self

    def numpy(self):
        return self.arr


def test_upload_torch_like_tensor(client):
    x = np.linspace(-1, 1, 2 * 2 * 4 * 8, dtype=np.float16).reshape(2, 2, 4, 8)
    t = client.upload(_FakeTorchTensor(x), name="fake-torch", device="cpu")
    assert t["dtype"] == "fp16" and list(t["shape"]) == [2, 2, 4, 8]
    assert client.download(t["id"]).tobytes() == x.tobytes()
    try:
        import torch  # noqa: F401
    except ImportError:
        return
    import torch
    b = torch.randn(1, 1, 4, 8, dtype=torch.bfloat16)
    t = client.upload(b, name="bf16", device="cpu")
    assert t["dtype"] == "bf16"
    got = client.download(t["id"])
    assert got.view(np.uint16).tobytes() == b.view(torch.int16).numpy().tobytes()


def test_big_seeds_travel_as_strings(client):
    # JSON numbers above 2^53 lose digits in every double-based reader: the client sends
    # them as decimal strings, and the record keeps every digit.
    for seed in (2 ** 53 + 1, 2 ** 64 - 1):
        rec = client.run(**tiny(seed=seed))
        assert rec["params"]["seed"] == str(seed)
    assert client.run(**tiny(seed=12345))["params"]["seed"] == 12345  # small ones stay numbers


def test_429_is_retried_after_retry_after(start_server):
    # One job hangs on the worker and one waits (queue_depth 1): a third is refused 429
    # until the hung job times out. With retry_429 the client waits Retry-After and gets in.
    import threading

    srv = start_server(extra=["--enable-fault-injection", "true", "--queue-depth", "1", "--job-timeout-s", "3",
                              "--cpu-threads", "1"])
    blockers = [threading.Thread(target=lambda: attnd.Client(srv.url, timeout=60).run(check=False,
                                                                                      **tiny(fault="hang")))
                for _ in range(2)]
    for t in blockers:
        t.start()
        time.sleep(0.5)
    try:
        with pytest.raises(attnd.AttndError) as ei:
            attnd.Client(srv.url, timeout=60).run(**tiny())
        assert ei.value.status == 429 and ei.value.code == "queue_full" and ei.value.retry_after is not None
        t0 = time.monotonic()
        rec = attnd.Client(srv.url, timeout=60, retry_429=30).run(**tiny())
        assert rec["status"] == "done" and time.monotonic() - t0 >= 1.0
    finally:
        for t in blockers:
            t.join(timeout=30)


def test_connection_is_retried_until_the_server_is_up(start_server):
    import socket
    import threading

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = {}
    starter = threading.Timer(1.5, lambda: started.setdefault(
        "srv", start_server(extra=["--listen", "127.0.0.1:%d" % port, "--cpu-threads", "1"])))
    starter.start()
    try:
        c = attnd.Client("http://127.0.0.1:%d" % port, timeout=30, retry_connect=8)
        assert c.health() == {"status": "ok"}
        with pytest.raises(attnd.AttndError) as ei:  # without retries the same gap is an error at once
            attnd.Client("http://127.0.0.1:9", timeout=5).health()
        assert ei.value.code == "connection_error"
    finally:
        starter.join()


# ---------------------------------------------------------------- attnd-cli runs: the history

def _cli_env():
    return dict(os.environ, PYTHONPATH=os.path.join(REPO, "clients", "python"))


@pytest.fixture(scope="module")
def history_server():
    """A server of its own with six runs of two shapes, tags on some."""
    from attnd_api_helpers import Api, AttndServer

    srv = AttndServer(extra=["--cpu-threads", "2"]).start()
    try:
        api = Api(srv.url)
        recs = [api.run_ok(**tiny(seq=8 if i % 2 else 16, seed=i, tags="odd" if i % 2 else "even")) for i in range(6)]
        yield srv, recs
        srv.stop_checked()
    finally:
        srv.cleanup()


def _table_rows(text):
    """The ids listed: the first column of the table (or the ids of JSON lines, as an older
    attnd-cli printed them, so that the tests fail on what it printed, not on how)."""
    lines = text.strip().splitlines()
    if lines and lines[0].startswith("{"):
        return [str(json.loads(line)["id"]) for line in lines]
    assert lines and lines[0].startswith("id"), text
    return [line.split()[0] for line in lines[1:]]


def _follow_record(line, header):
    """One line of runs --follow: a JSON record, or a table row read by the header's columns."""
    if line.startswith("{"):
        return json.loads(line)
    names, cells = header.split(), line.split()
    return {"id": int(cells[names.index("id")]), "status": cells[names.index("status")]}


def test_cli_runs_limit_is_a_limit(history_server, capsys):
    """--limit 3 printed 5 runs, --since … --limit 2 printed 12: it was the page size."""
    srv, recs = history_server
    assert cli.main(["runs", "--url", srv.url, "--limit", "3"]) == 0
    assert _table_rows(capsys.readouterr().out) == [str(r["id"]) for r in recs[:3]]
    assert cli.main(["runs", "--url", srv.url, "--since", "2000-01-01", "--limit", "2", "--json"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [json.loads(line)["id"] for line in lines] == [r["id"] for r in recs[:2]]
    assert cli.main(["runs", "--url", srv.url, "--order", "newest", "--limit", "2"]) == 0
    assert _table_rows(capsys.readouterr().out) == [str(r["id"]) for r in recs[::-1][:2]]
    assert cli.main(["runs", "--url", srv.url]) == 0
    assert _table_rows(capsys.readouterr().out) == [str(r["id"]) for r in recs], "no --limit: all of them"
    with pytest.raises(SystemExit) as ei:
        cli.main(["runs", "--url", srv.url, "--limit", "0"])
    assert ei.value.code == 2


def test_cli_runs_filters_aggregate_and_csv(history_server, capsys):
    srv, recs = history_server
    assert cli.main(["runs", "--url", srv.url, "--seq", "8", "--tag", "odd", "--backend", "reference"]) == 0
    out = capsys.readouterr().out
    assert _table_rows(out) == [str(r["id"]) for r in recs if r["params"]["seq_q"] == 8]
    assert "tags" in out.splitlines()[0] and "odd" in out
    assert cli.main(["runs", "--url", srv.url, "--group-by", "seq_q", "--json"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert [(g["seq_q"], g["count"]) for g in body["groups"]] == [(8, 3), (16, 3)]
    assert cli.main(["runs", "--url", srv.url, "--group-by", "seq_q,dtype"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].split() == ["seq_q", "dtype", "count", "median_us", "min_us", "max_us"] and len(lines) == 3
    assert cli.main(["runs", "--url", srv.url, "--csv", "--limit", "4", "--head-dim", "8"]) == 0
    out = capsys.readouterr().out
    rows = out.splitlines()
    assert rows[0].startswith("id,status,") and len(rows) == 5
    assert [int(line.split(",")[0]) for line in rows[1:]] == [r["id"] for r in recs[:4]]
    assert cli.main(["runs", "--url", srv.url, "--backend", "nope"]) == 1
    assert "unknown_backend" in capsys.readouterr().err


def test_cli_runs_quiet_on_a_closed_pipe(history_server):
    """`attnd-cli runs | head` ended in a BrokenPipeError traceback."""
    srv, recs = history_server
    api = attnd.Client(srv.url, timeout=60)
    for i in range(40):  # ~2.5 KB of JSON each: more than a pipe holds, so the writer meets the closed end
        api.run(**tiny(seed=100 + i))
    for argv in ([], ["--json"], ["--json", "--order", "newest"]):
        p = subprocess.run(["bash", "-c", 'set -o pipefail; "$0" -m attnd runs --url "$1" "${@:2}" | head -1',
                            sys.executable, srv.url] + argv, capture_output=True, text=True, timeout=120,
                           env=_cli_env(), cwd=REPO)
        assert p.returncode == 0 and p.stdout.count("\n") == 1, (argv, p.returncode, p.stdout[:200])
        assert p.stderr == "", (argv, p.stderr[-2000:])


def test_cli_runs_follow_updates_a_run_until_it_is_final(start_server):
    """--follow printed a run as `running` once and never again."""
    import queue
    import threading

    srv = start_server(extra=["--enable-fault-injection", "true", "--job-timeout-s", "3", "--cpu-threads", "1"])
    c = attnd.Client(srv.url, timeout=60)
    first = c.run(**tiny())
    p = subprocess.Popen([sys.executable, "-m", "attnd", "runs", "--url", srv.url, "--follow"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_cli_env(), cwd=REPO)
    lines = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in p.stdout], daemon=True).start()
    header = []

    def next_record(timeout=30):
        try:
            line = lines.get(timeout=timeout)
            if line.startswith("id "):  # the table's header, once
                header.append(line)
                line = lines.get(timeout=timeout)
            return _follow_record(line, header[0] if header else "")
        except queue.Empty:
            raise AssertionError("attnd-cli runs --follow printed nothing for %d s" % timeout)

    try:
        assert next_record()["id"] == first["id"]
        hung = c.submit(**tiny(fault="hang"))["id"]  # the worker hangs: the job times out after 3 s, failed
        later = c.submit(**tiny(seed=5))["id"]       # queued behind it, then done
        states = {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (states.get(hung, [""])[-1] == "failed"
                                                   and states.get(later, [""])[-1] == "done"):
            rec = next_record()
            states.setdefault(rec["id"], []).append(rec["status"])
        assert states[hung][-1] == "failed" and states[hung][0] in ("queued", "running"), states
        assert states[later][-1] == "done" and len(states[later]) >= 2, states
        for seen in states.values():
            assert len(seen) == len(set(seen)), "a state printed twice: %s" % states
    finally:
        p.kill()
        p.wait(timeout=10)


# ---------------------------------------------------------------- verify, noise, ETA, help, tensors, cancel, DataFrames

def _tensor_ids(client, bad_v):
    """q, k and v uploaded to the cpu device; with bad_v, v holds an infinity: the output is not
    finite and verify fails (the only way a cpu run's verify can fail)."""
    q = (np.random.default_rng(9).standard_normal((1, 2, 16, 8))).astype(np.float16)
    v = q.copy()
    if bad_v:
        v[0, 0, 5, 1] = np.inf
    return {n: client.upload(a, name=n, device="cpu")["id"] for n, a in (("q", q), ("k", q), ("v", v))}


def _resident(ids):
    return [x for n in ("q", "k", "v") for x in ("--param", "%s=%s" % (n, ids[n]))]


def _cells(out):
    """The table's rows as dicts by its header's columns (cells hold no spaces here)."""
    lines = out.strip().splitlines()
    head = lines[0].split()
    return [dict(zip(head, line.split())) for line in lines[1:]]


def test_cli_verify_column_and_exit_status(server, client, capsys, tmp_path):
    """run and sweep --verify true showed no verify column, and sweep exited 0 when
    verify.pass was false (attnd batch exits 1 on the same plan)."""
    bad, good = _tensor_ids(client, True), _tensor_ids(client, False)
    base = ["--url", server.url, "--device", "cpu", "--iters", "2", "--warmup", "0", "--verify", "true",
            "--target-noise", "0.99"]
    rc = cli.main(["run", "--backend", "reference"] + base + _resident(bad))
    cap = capsys.readouterr()
    rows = _cells(cap.out)
    assert rc == 1 and rows[0]["verify"] == "FAIL" and rows[0]["status"] == "done", cap
    assert "verify failed: run %s" % rows[0]["id"] in cap.err
    rc = cli.main(["run", "--backend", "reference"] + base + _resident(good))
    rows = _cells(capsys.readouterr().out)
    assert rc == 0 and rows[0]["verify"] == "pass"
    csv_path = tmp_path / "bad.csv"
    rc = cli.main(["sweep", "--backends", "reference", "--csv", str(csv_path)] + base + _resident(bad))
    cap = capsys.readouterr()
    assert rc == 1 and _cells(cap.out)[0]["verify"] == "FAIL", cap
    import csv as csvmod
    with open(csv_path) as f:
        assert [r["verify"] for r in csvmod.DictReader(f)] == ["FAIL"]
    rc = cli.main(["sweep", "--backends", "reference", "--repeat", "2"] + base + _resident(good))
    cap = capsys.readouterr()
    assert rc == 0 and [r["verify"] for r in _cells(cap.out)] == ["pass", "pass"], cap


def test_cli_sweep_study_takes_resident_inputs(server, client, capsys, tmp_path):
    """sweep --study gave --param q/k/v to plain runs only: its studies ran generated inputs
    (a v holding an infinity verified as a pass). Now every study takes them, and a serving
    batch's block table and lengths given as tensor ids as well."""
    bad = _tensor_ids(client, True)
    out = tmp_path / "study.json"
    base = ["--url", server.url, "--device", "cpu", "--iters", "2", "--warmup", "0", "--verify", "true",
            "--study", "--rounds", "1", "--no-progress", "--json", str(out)]
    rc = cli.main(["sweep", "--backends", "reference"] + base + _resident(bad))
    cap = capsys.readouterr()
    (result,) = json.loads(out.read_text())
    assert rc == 1 and "FAIL" in cap.out, cap
    (run,) = result["study"]["runs"]
    rec = client.get_run(run["id"]) if isinstance(run, dict) else client.get_run(run)
    assert [rec["params"][n] for n in ("q", "k", "v")] == [bad["q"], bad["k"], bad["v"]], rec["params"]
    # a paged batch: the block table and the lengths are tensors, the cache generated around them
    table = client.upload(np.array([[3, 1], [0, 0]], np.int32), name="block_table", device="cpu")["id"]
    lengths = client.upload(np.array([5, 3], np.int32), name="seqlens_kv", device="cpu")["id"]
    serving = ["--heads", "2", "--head-dim", "8", "--param", "page_size=4", "--param", "seq_q=1",
               "--param", "mask=causal_bottom_right", "--param", "block_table=" + table,
               "--param", "seqlens_kv=" + lengths]
    base[base.index("--verify") + 1] = "false"
    rc = cli.main(["sweep", "--backends", "reference"] + base + serving)
    cap = capsys.readouterr()
    (result,) = json.loads(out.read_text())
    assert rc == 0, cap
    (run,) = result["study"]["runs"]
    rec = client.get_run(run["id"]) if isinstance(run, dict) else client.get_run(run)
    assert (rec["params"]["block_table"], rec["params"]["seqlens_kv"]) == (table, lengths), rec["params"]


def test_cli_flags_runs_that_missed_their_noise_target(server, capsys, tmp_path):
    """A run that stopped on max_iters with an rse far above its target looked like any
    other in the table and the CSV."""
    base = ["--url", server.url, "--device", "cpu", "--batch", "1", "--heads", "1", "--head-dim", "8",
            "--min-iters", "3", "--warmup", "0", "--profile", "false"]
    noisy = ["--max-iters", "5", "--target-noise", "1e-9"]
    rc = cli.main(["run", "--backend", "reference", "--seq", "8", "--json"] + base + noisy)
    rec = json.loads(capsys.readouterr().out)
    assert rc == 0 and rec["timing"]["rse"] > rec["params"]["target_noise"]
    assert attnd.noise_missed(rec) is True
    csv_path = tmp_path / "noisy.csv"
    rc = cli.main(["sweep", "--backends", "reference", "--seq", "8,16", "--csv", str(csv_path)] + base + noisy)
    cap = capsys.readouterr()
    assert rc == 0, cap  # noisy is a flag, not a failure
    want = "missed:%s" % rec["timing"]["stop_reason"]
    assert [r["noise"] for r in _cells(cap.out)] == [want, want], cap.out
    assert "noise target missed" in cap.err
    import csv as csvmod
    with open(csv_path) as f:
        assert [r["noise"] for r in csvmod.DictReader(f)] == [want, want]
    rc = cli.main(["sweep", "--backends", "reference", "--seq", "8,16", "--csv", str(csv_path), "--max-iters", "200",
                   "--target-noise", "0.99"] + base)
    cap = capsys.readouterr()
    assert rc == 0 and "noise" not in cap.out.splitlines()[0].split(), cap.out   # nothing to flag: no column
    with open(csv_path) as f:
        assert [r["noise"] for r in csvmod.DictReader(f)] == ["", ""]
    assert "noise target missed" not in cap.err


def test_cli_sweep_progress_has_an_eta(server, capsys):
    rc = cli.main(["sweep", "--url", server.url, "--backends", "reference", "--seq", "8,16,8"] + TINY_CLI)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("[")]
    assert rc == 0 and len(lines) == 3, err
    for i, line in enumerate(lines, 1):
        assert "%d/3" % i in line and re.search(r" ETA \d+(\.\d)?s ", line), line
    assert cli._duration(3725) == "1h02m" and cli._duration(125) == "2m05s" and cli._duration(1.25) == "1.2s"


def _docs_param_defaults():
    """The default column of docs/api.md's run parameter table, by parameter."""
    with open(os.path.join(REPO, "docs", "api.md")) as f:
        text = f.read()
    table = text[text.index("<!-- run-params:begin"):text.index("<!-- run-params:end")]
    out = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        m = re.match(r"^`(\w+)`$", cells[0]) if len(cells) >= 3 else None
        if m:
            out[m.group(1)] = cells[2].replace("`", "")
    return out


def test_cli_every_flag_has_help_and_its_default():
    """CLI flags had no help text or defaults; a run parameter's default is the server's, as
    docs/api.md's generated table says it."""
    import argparse
    docs = _docs_param_defaults()
    missing, checked = [], 0

    def walk(parser, path):
        nonlocal checked
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, child in action.choices.items():
                    walk(child, path + [name])
                continue
            if isinstance(action, argparse._HelpAction):
                continue
            if not action.option_strings:  # a positional argument: it says what it is
                if not (action.help or "").strip():
                    missing.append("%s %s: no help" % (" ".join(path), action.dest))
                continue
            flag = "%s %s" % (" ".join(path), action.option_strings[0])
            text = action.help or ""
            if not text.strip() or ("default" not in text and not action.required):
                missing.append("%s: %r" % (flag, text))
            if path == ["run"] and action.dest in docs and action.dest not in ("backend",):
                checked += 1
                if "server default: %s)" % docs[action.dest] not in text:
                    missing.append("%s says %r; docs/api.md: %r" % (flag, text, docs[action.dest]))

    walk(cli.build_parser(), [])
    assert not missing, "\n".join(missing)
    assert checked >= 25, checked
    # And every subcommand has a line in attnd-cli --help.
    sub = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert all((c.help or "").strip() for c in sub._choices_actions) and \
        {c.dest for c in sub._choices_actions} == set(sub.choices), [c.dest for c in sub._choices_actions]


def test_cli_tensors_list_of_none(start_server, capsys):
    """No tensor: no table on stdout (it printed an empty line), a word on stderr."""
    srv = start_server()
    assert cli.main(["tensors", "list", "--url", srv.url]) == 0
    got = capsys.readouterr()
    assert got.out == "" and "no resident tensors" in got.err, got


def test_cli_tensors_upload_list_download_delete(server, capsys, tmp_path):
    from attnd_api_helpers import safetensors_bytes
    url = ["--url", server.url]
    x = (np.arange(1 * 2 * 4 * 8, dtype=np.float32).reshape(1, 2, 4, 8) / 5).astype(np.float32)
    np.save(tmp_path / "queries.npy", x)
    assert cli.main(["tensors", "upload", str(tmp_path / "queries.npy"), "--device", "cpu"] + url) == 0
    row = _cells(capsys.readouterr().out)[0]
    assert row["name"] == "queries" and row["shape"] == "1x2x4x8" and row["dtype"] == "fp32", row
    tid = row["id"]
    (tmp_path / "keys.bin").write_bytes(x.astype(np.float16).tobytes())
    assert cli.main(["tensors", "upload", str(tmp_path / "keys.bin"), "--dtype", "fp16", "--shape", "1,2,4,8",
                     "--device", "cpu"] + url) == 0
    raw = _cells(capsys.readouterr().out)[0]
    assert raw["name"] == "keys" and raw["dtype"] == "fp16"
    (tmp_path / "pair.safetensors").write_bytes(safetensors_bytes([("k", "F16", x.astype(np.float16)),
                                                                    ("v", "F32", x)]))
    assert cli.main(["tensors", "upload", str(tmp_path / "pair.safetensors"), "--device", "cpu"] + url) == 0
    assert sorted(r["name"] for r in _cells(capsys.readouterr().out)) == ["k", "v"]
    assert cli.main(["tensors", "list"] + url) == 0
    listed = {r["id"]: r for r in _cells(capsys.readouterr().out)}
    assert listed[tid]["state"] == "resident" and raw["id"] in listed
    out = tmp_path / "back.npy"
    assert cli.main(["tensors", "download", tid, "--out", str(out)] + url) == 0
    capsys.readouterr()
    assert np.load(out).tobytes() == x.tobytes()
    assert cli.main(["tensors", "delete", tid, raw["id"]] + url) == 0
    assert capsys.readouterr().out.split() == ["deleted", tid, "deleted", raw["id"]]
    assert cli.main(["tensors", "list", "--json"] + url) == 0
    assert tid not in [t["id"] for t in json.loads(capsys.readouterr().out)["tensors"]]
    assert cli.main(["tensors", "delete", tid] + url) == 1
    assert "404" in capsys.readouterr().err
    assert cli.main(["tensors", "upload", str(tmp_path / "nope.npy")] + url) == 2


def test_cli_cancel(start_server, capsys):
    """There was no cancel subcommand (DELETE /v1/runs/ID)."""
    srv = start_server(extra=["--enable-fault-injection", "true", "--job-timeout-s", "4", "--cpu-threads", "1"])
    c = attnd.Client(srv.url, timeout=60)
    hung = c.submit(**tiny(fault="hang"))["id"]
    queued = c.submit(**tiny(seed=3))["id"]
    deadline = time.monotonic() + 30
    while c.get_run(hung)["status"] != "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cli.main(["cancel", str(queued), "--url", srv.url]) == 0
    rows = _cells(capsys.readouterr().out)
    assert rows[0]["id"] == str(queued) and rows[0]["status"] == "cancelled", rows
    assert c.get_run(queued)["status"] == "cancelled"
    assert cli.main(["cancel", str(hung), "--url", srv.url]) == 1   # running: 409 not_queued
    assert "not_queued" in capsys.readouterr().err
    c.wait(hung, timeout=60)


def test_to_dataframe_without_pandas_says_what_to_install(monkeypatch):
    """pandas is optional: without it, to_dataframe says to install it and what works without
    (flatten_record); the rest of the client imports and runs."""
    monkeypatch.setitem(sys.modules, "pandas", None)   # import pandas now raises ImportError
    rec = {"id": 1, "status": "done", "params": {"heads": 2, "head_dim": 8, "target_noise": 0.01},
           "timing": {"median_us": 5.0, "rse": 0.05}}
    with pytest.raises(ImportError, match=r"needs pandas \(pip install pandas\).*flatten_record"):
        attnd.to_dataframe([rec])
    row = attnd.flatten_record(rec)
    assert row["median_us"] == 5.0 and row["kv_heads"] == 2 and row["noise_missed"] is True


def test_to_dataframe_has_the_csv_columns(client, server, tmp_path):
    """attnd.to_dataframe: records, a runs page or sweep results as a DataFrame whose columns
    are the server's CSV columns (then target_noise and noise_missed), with the same values."""
    import io
    pd = pytest.importorskip("pandas", reason="pandas is optional (pip install pandas)")
    recs = [client.run(**tiny(seed=40 + i, tags=["df"])) for i in range(3)]
    df = attnd.to_dataframe(recs)
    text, _ = client.runs_csv(tag="df", limit=10)
    csv_df = pd.read_csv(io.StringIO(text))
    assert list(df.columns[:len(csv_df.columns)]) == list(csv_df.columns)
    assert list(df.columns) == list(attnd.RECORD_COLUMNS) and list(df.columns[-2:]) == ["target_noise", "noise_missed"]
    assert list(df["id"]) == [r["id"] for r in recs] == list(csv_df["id"])
    for col in ("median_us", "p10_us", "p90_us", "rse", "seq_q", "kv_heads", "head_dim_v", "iters", "page_size", "ragged"):
        pd.testing.assert_series_equal(df[col], csv_df[col], check_dtype=False, obj=col)
    assert list(df["tags"]) == ["df"] * 3 and list(df["backend"]) == ["reference"] * 3
    assert str(df["created"].dt.tz) == "UTC"
    assert list(df["noise_missed"]) == [attnd.noise_missed(r) for r in recs]
    page = client.runs(tag="df")
    assert list(attnd.to_dataframe(page)["id"]) == list(df["id"])
    assert list(attnd.to_dataframe(client.iter_runs(tag="df"))["id"]) == list(df["id"])
    # attnd-cli sweep --json's results, a refusal among them.
    out = tmp_path / "sweep.json"
    assert cli.main(["sweep", "--url", server.url, "--backends", "reference,naive", "--seq", "8", "--json", str(out),
                     "--no-progress"] + TINY_CLI) == 1
    swept = attnd.to_dataframe(json.loads(out.read_text()))
    assert list(swept["status"]) == ["done", "refused"] and swept["error"][1] in ("unsupported", "no_device")
    assert swept["seq_q"][1] == 8 and swept["backend"][1] == "naive"
    assert attnd.flatten_record(recs[0])["median_us"] == recs[0]["timing"]["median_us"]
