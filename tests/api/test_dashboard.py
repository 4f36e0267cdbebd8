"""The dashboard (GET /, clients/dashboard) in a real headless Chromium against a real attnd on
the cpu device, driven through the DevTools protocol (websocket-client): the test fills the
form, clicks Run, and waits until the run it started is in the table and in the chart. Also:
static files are served with their types, and nothing outside the directory can be reached.

The analyses (every run of a shape on a log axis, the history view, deep links, the flags,
the study view) are checked in the page's marks and in screenshots: Chromium's PNG of a chart
is decoded here and its pixels must show what the chart draws (dots of the run colour in each
row, a failed verify in red). ATTND_SCREENSHOT_DIR=DIR keeps the screenshots there (the study
view's as DIR/dashboard-study.png: docs/ holds one made so).

Skipped (with the reason) when no chromium binary is installed: scripts/install-deps.sh
installs Debian's `chromium` package in CI.
"""
import base64
import json
import math
import os
import re
import shutil
import struct
import subprocess
import tempfile
import time
import zlib
from urllib.parse import quote

import pytest

from attnd_api_helpers import HTTP_TIMEOUT_S, AttndServer, Api, tiny

DASH = os.path.join(os.path.dirname(__file__), "..", "..", "clients", "dashboard")
PAGE_TIMEOUT_S = 60.0


def chromium_bin():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One headless Chromium with a DevTools websocket to one page."""

    def __init__(self):
        import websocket  # websocket-client (pip), installed by scripts/install-deps.sh
        self.profile = tempfile.mkdtemp(prefix="attnd-chromium-")
        self.proc = subprocess.Popen(
            [chromium_bin(), "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--no-first-run", "--no-default-browser-check", "--disable-extensions",
             "--remote-debugging-port=0", "--remote-allow-origins=*", "--user-data-dir=" + self.profile,
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        ws_url = None
        deadline = time.monotonic() + 30
        lines = []
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                if self.proc.poll() is not None:
                    break
                continue
            lines.append(line)
            m = re.search(r"DevTools listening on (ws://\S+)", line)
            if m:
                ws_url = m.group(1)
                break
        if not ws_url:
            self.close()
            pytest.fail("chromium did not start its DevTools endpoint:\n" + "".join(lines[-20:]), pytrace=False)
        self.browser_ws = websocket.create_connection(ws_url, timeout=30)
        self.next_id = 0
        target = self._call(self.browser_ws, "Target.createTarget", {"url": "about:blank"})["targetId"]
        port = re.search(r"ws://[^:]+:(\d+)/", ws_url).group(1)
        self.ws = websocket.create_connection("ws://127.0.0.1:%s/devtools/page/%s" % (port, target), timeout=30)
        self._call(self.ws, "Runtime.enable")
        # A fixed window, so that charts and screenshots have the same size on every machine.
        self._call(self.ws, "Emulation.setDeviceMetricsOverride",
                   {"width": 1280, "height": 1000, "deviceScaleFactor": 1, "mobile": False})
        self.console = []

    def _call(self, ws, method, params=None):
        self.next_id += 1
        mid = self.next_id
        ws.send(json.dumps({"id": mid, "method": method, "params": params or {}}))
        while True:
            msg = json.loads(ws.recv())
            if "method" in msg:
                self.on_event(ws, msg)
            if msg.get("id") == mid:
                if "error" in msg:
                    raise AssertionError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})

    def on_event(self, ws, msg):
        """A DevTools event that arrived while waiting for a reply: page exceptions are kept."""
        if msg["method"] == "Runtime.exceptionThrown":
            self.console.append(json.dumps(msg["params"])[:500])

    def navigate(self, url):
        self._call(self.ws, "Page.navigate", {"url": url})

    def eval(self, expr):
        r = self._call(self.ws, "Runtime.evaluate", {"expression": expr, "returnByValue": True, "awaitPromise": True})
        if "exceptionDetails" in r:
            raise AssertionError("page exception: %s" % json.dumps(r["exceptionDetails"])[:1000])
        return r["result"].get("value")

    def wait_for(self, expr, what, timeout=PAGE_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        value = None
        while time.monotonic() < deadline:
            value = self.eval(expr)
            if value:
                return value
            time.sleep(0.2)
        raise AssertionError("timed out waiting for %s (last %r); page text:\n%s\nexceptions: %s"
                             % (what, value, self.eval("document.body ? document.body.innerText.slice(0, 3000) : ''"),
                                self.console))

    def screenshot(self, selector, name=None):
        """The PNG of one element of the page, as Chromium paints it (decoded: Png). With
        ATTND_SCREENSHOT_DIR set, also written there as NAME.png."""
        rect = self.eval("(() => { const e = document.querySelector(%s); e.scrollIntoView({block: 'start'});"
                         " const r = e.getBoundingClientRect();"
                         " return [r.x + window.scrollX, r.y + window.scrollY, r.width, r.height]; })()"
                         % json.dumps(selector))
        shot = self._call(self.ws, "Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": rect[0], "y": rect[1], "width": rect[2], "height": rect[3], "scale": 1}})
        data = base64.b64decode(shot["data"])
        keep = os.environ.get("ATTND_SCREENSHOT_DIR")
        if keep and name:
            os.makedirs(keep, exist_ok=True)
            with open(os.path.join(keep, name + ".png"), "wb") as f:
                f.write(data)
        return Png(data)

    def close(self):
        for ws in (getattr(self, "ws", None), getattr(self, "browser_ws", None)):
            try:
                if ws:
                    ws.close()
            except Exception:
                pass
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        shutil.rmtree(self.profile, ignore_errors=True)


class Png:
    """A PNG decoded: width, height and pixel(x, y) -> (r, g, b). Only what Chromium writes:
    8-bit RGB or RGBA, not interlaced (PIL is not a test dependency)."""

    def __init__(self, data):
        assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
        pos, idat = 8, b""
        while pos < len(data):
            n, kind = struct.unpack(">I4s", data[pos:pos + 8])
            body = data[pos + 8:pos + 8 + n]
            pos += 12 + n
            if kind == b"IHDR":
                self.width, self.height, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
                assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
                self.bpp = 3 if ctype == 2 else 4
            elif kind == b"IDAT":
                idat += body
        raw, stride = zlib.decompress(idat), self.width * self.bpp
        rows, prev, i = [], bytearray(stride), 0
        for _ in range(self.height):
            kind, line = raw[i], bytearray(raw[i + 1:i + 1 + stride])
            i += 1 + stride
            self._unfilter(kind, line, prev)
            rows.append(line)
            prev = line
        self.rows = rows

    def _unfilter(self, kind, line, prev):
        bpp = self.bpp
        if kind == 1:
            for x in range(bpp, len(line)):
                line[x] = (line[x] + line[x - bpp]) & 255
        elif kind == 2:
            for x in range(len(line)):
                line[x] = (line[x] + prev[x]) & 255
        elif kind == 3:
            for x in range(len(line)):
                line[x] = (line[x] + ((line[x - bpp] if x >= bpp else 0) + prev[x]) // 2) & 255
        elif kind == 4:
            for x in range(len(line)):
                a, b = (line[x - bpp] if x >= bpp else 0), prev[x]
                c = prev[x - bpp] if x >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255

    def pixel(self, x, y):
        row, o = self.rows[y], x * self.bpp
        return tuple(row[o:o + 3])

    def where(self, colour, tolerance=12):
        """The (x, y) of every pixel within tolerance of colour (r, g, b)."""
        out = []
        for y in range(self.height):
            row = self.rows[y]
            for x in range(self.width):
                o = x * self.bpp
                if all(abs(row[o + k] - colour[k]) <= tolerance for k in range(3)):
                    out.append((x, y))
        return out

    def colours(self):
        """How many distinct colours the image holds (a blank chart has two or three)."""
        return len({bytes(self.rows[y][x * self.bpp:x * self.bpp + 3]) for y in range(0, self.height, 2)
                    for x in range(0, self.width, 2)})


def blobs(points, gap=2):
    """Points grouped into clusters of neighbours (within gap pixels): the dots of a chart."""
    left, groups = set(points), []
    while left:
        todo, group = [left.pop()], []
        while todo:
            x, y = todo.pop()
            group.append((x, y))
            near = [(a, b) for a in range(x - gap, x + gap + 1) for b in range(y - gap, y + gap + 1) if (a, b) in left]
            for p in near:
                left.discard(p)
                todo.append(p)
        groups.append(group)
    return groups


RUN_BLUE = (0x3b, 0x82, 0xc4)     # style.css: a run's dot, a bar
FAIL_RED = (0xb3, 0x1d, 0x28)     # a failed verify
NOISE_ORANGE = (0xd0, 0x87, 0x00)  # the ring of a run that missed its noise target


@pytest.fixture
def browser():
    if not chromium_bin():
        pytest.skip("no chromium binary (scripts/install-deps.sh installs Debian's chromium)")
    b = Browser()
    yield b
    b.close()


def test_static_files_and_types(api):
    r = api.get("/")
    assert r.status_code == 200 and r.headers["Content-Type"].startswith("text/html"), (r.status_code, r.headers)
    assert "app.js" in r.text
    for name, ctype in (("app.js", "text/javascript"), ("style.css", "text/css"), ("index.html", "text/html")):
        r = api.get("/dashboard/" + name)
        assert r.status_code == 200 and r.headers["Content-Type"].startswith(ctype), (name, r.headers)
        with open(os.path.join(DASH, name), "rb") as f:
            assert r.content == f.read()


@pytest.mark.parametrize("path", ["/dashboard/..", "/dashboard/.hidden", "/dashboard/%2e%2e%2fMakefile",
                                  "/dashboard/..%2f..%2fMakefile", "/dashboard/../../Makefile",
                                  "/dashboard/nope.js", "/dashboard/a%00b", "/../Makefile"])
def test_no_path_traversal(api, path):
    # requests would normalise "..": send the raw path.
    import http.client
    from urllib.parse import urlparse
    u = urlparse(api.url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=HTTP_TIMEOUT_S)
    c.request("GET", path)
    r = c.getresponse()
    body = r.read()
    c.close()
    assert r.status == 404, (path, r.status, body[:200])
    assert b"attnd" not in body.lower() or b"error" in body  # an error object, never a file


def test_page_uses_no_other_host():
    for name in os.listdir(DASH):
        with open(os.path.join(DASH, name), encoding="utf-8") as f:
            text = f.read()
        assert not re.search(r"(src|href)\s*=\s*[\"']?(https?:)?//", text), name
        text = text.replace("http://www.w3.org/2000/svg", "")  # the SVG namespace name, never fetched
        assert "http://" not in text and "https://" not in text, name


def run_from_form(browser, fields):
    """Fill the form's fields ({"batch": "1", …}) as a person would, click Run, and return the
    id of the run its 202 names."""
    browser.eval("""(() => {
        for (const [name, v] of Object.entries(%s)) {
            const e = document.getElementById('f-' + name); e.value = v; e.dispatchEvent(new Event('input'));
        }
        document.getElementById('f-submit').click();
        return true; })()""" % json.dumps(fields))
    return int(browser.wait_for("document.querySelector('#form-status').dataset.runId || ''", "the 202 of the form's run"))


def test_form_run_appears_in_table_and_chart(api, browser):
    seed = int(time.time() * 1000) % 1000000007   # marks the run as the one the form started
    browser.navigate(api.url + "/")
    browser.wait_for("document.readyState === 'complete' && !!document.querySelector('#f-backend option[value=reference]')",
                     "the page and its backend list")
    browser.wait_for("document.querySelector('#conn').textContent.startsWith('live')", "the first poll")
    run_id = run_from_form(browser, {"backend": "reference", "device": "cpu", "batch": "1", "heads": "2", "seq": "16",
                                     "head_dim": "8", "warmup": "0", "iters": "1", "seed": str(seed)})
    # The server has it, with the form's parameters.
    rec = api.get("/v1/runs/%d" % run_id).json()
    assert rec["backend"] == "reference" and rec["params"]["seed"] == seed, rec
    # The table shows it as done, and the timing chart has its bar.
    browser.wait_for("(() => { const tr = document.querySelector('#runs tbody tr[data-id=\"%d\"]');"
                     " return tr && tr.dataset.status === 'done'; })()" % run_id, "run %d done in the table" % run_id)
    node = browser.eval("document.querySelector('#runs tbody tr[data-id=\"%d\"] td.node').textContent" % run_id)
    assert node == rec["node"] and node, (node, rec.get("node"))
    dot = browser.wait_for("(() => { const b = document.querySelector('#chart-timing circle.run[data-run=\"%d\"]');"
                           " return b ? b.closest('g.row').querySelector('text.label').textContent + ' ' +"
                           " b.getAttribute('cx') : ''; })()" % run_id, "run %d in the timing chart" % run_id)
    assert dot.split()[0] == "reference" and float(dot.split()[-1]) > 0, dot
    # Its detail: clicking the row shows the run, its verify, and no trace link (a cpu run
    # has no trace: the link would lead to a 404).
    shown = browser.eval("(() => { document.querySelector('#runs tbody tr[data-id=\"%d\"]').click();"
                         " return [document.querySelector('#d-trace').hidden,"
                         " JSON.parse(document.querySelector('#d-summary').textContent)]; })()" % run_id)
    assert shown[0] is True and "verify" in shown[1], shown
    assert api.get("/v1/runs/%d/trace" % run_id).status_code == 404


FORM_NUMBERS = ("batch", "heads", "kv_heads", "seq", "seq_q", "seq_kv", "head_dim", "head_dim_v", "window",
                "page_size", "num_pages", "warmup", "iters", "seed")
# The fields whose default the API states in words (a rule of other parameters), not a value.
FORM_WORDED = {"kv_heads": "= heads", "seq_q": "= seq", "seq_kv": "= seq", "head_dim_v": "= head_dim",
               "window": "none", "page_size": "0 (contiguous)", "num_pages": "needed + 25%", "iters": "0 (rule)"}


def test_form_defaults_are_the_servers(api, browser):
    """The form defaulted to warmup 0, iters 1 (and a shape of its own): its run was 15x the
    API's for the same shape, and became the chart's bar. Now every number starts empty and
    is not sent, so the server's default applies; each field shows that default, as
    GET /openapi.json states it; the checkboxes and lists start at the API's values."""
    props = api.get("/openapi.json").json()["components"]["schemas"]["RunParams"]["properties"]
    browser.navigate(api.url + "/")
    browser.wait_for("document.readyState === 'complete' && document.getElementById('f-batch').placeholder !== "
                     "'server default'", "the page and the API's defaults")
    fields = browser.eval("%s.map((n) => { const e = document.getElementById('f-' + n);"
                          " return [n, e.value, e.placeholder]; })" % json.dumps(FORM_NUMBERS))
    for name, value, placeholder in fields:
        assert value == "", (name, value)
        if name in FORM_WORDED:
            assert placeholder == FORM_WORDED[name], (name, placeholder)
            assert name == "iters" or "default" not in props[name], (name, props[name])  # iters: 0 is the rule
        else:
            assert placeholder == str(props[name]["default"]), (name, placeholder, props[name]["default"])
    assert props["iters"]["default"] == 0 and [f[2] for f in fields if f[0] == "iters"] == ["0 (rule)"]
    body = json.loads(browser.eval("JSON.stringify(formBody())"))
    assert body == {"backend": "reference", "dtype": props["dtype"]["default"], "mask": props["mask"]["default"],
                    "profile": props["profile"]["default"], "verify": props["verify"]["default"]}, body


def test_form_runs_a_paged_ragged_decode(api, browser):
    """seq_q and seq_kv apart, page_size, num_pages and the lengths of a ragged batch: the form
    sends what was typed (lengths as written: a list or uniform:MIN:MAX), the record has it,
    and the table shows the layout."""
    seed = int(time.time() * 1000) % 1000000007 + 2
    browser.navigate(api.url + "/")
    browser.wait_for("document.readyState === 'complete' && !!document.querySelector('#f-backend option[value=reference]')",
                     "the page and its backend list")
    run_id = run_from_form(browser, {"backend": "reference", "device": "cpu", "batch": "3", "heads": "4",
                                     "kv_heads": "2", "seq_q": "1", "seq_kv": "40", "head_dim": "8",
                                     "mask": "causal_bottom_right", "page_size": "16", "num_pages": "9",
                                     "seqlens_kv": " 40,0,17 ", "warmup": "0", "iters": "1", "seed": str(seed)})
    rec = api.get("/v1/runs/%d" % run_id).json()
    p = rec["params"]
    assert (p["seq_q"], p["seq_kv"], p["page_size"], p["num_pages"], p["seqlens_kv"]) == (1, 40, 16, 9, [40, 0, 17]), p
    assert "seqlens_q" not in p and p["seed"] == seed, p
    shape = browser.wait_for("(() => { const tr = document.querySelector('#runs tbody tr[data-id=\"%d\"]');"
                             " return tr ? tr.querySelector('td.shape').textContent : ''; })()" % run_id,
                             "run %d in the table" % run_id)
    assert "P16" in shape, shape
    browser.eval("""(() => { const e = document.getElementById('f-seqlens_kv'); e.value = 'uniform:1:40';
        document.getElementById('f-seed').value = '%d'; return true; })()""" % (seed + 1))
    assert json.loads(browser.eval("JSON.stringify(formBody())"))["seqlens_kv"] == "uniform:1:40"


def test_form_offers_the_model_presets(api, browser):
    """The form lists GET /v1/models; choosing one fills its fields, and a run started with a
    field changed carries the preset, the parameters it filled and what was overridden."""
    seed = int(time.time() * 1000) % 1000000007 + 1
    models = api.get("/v1/models").json()["models"]
    mistral = next(m for m in models if m.get("window") is not None and m["kv_heads"] < m["heads"])
    browser.navigate(api.url + "/")
    browser.wait_for("document.querySelectorAll('#f-model option').length === %d" % (len(models) + 1),
                     "the model presets in the form")
    filled = browser.eval("""(() => {
        const m = document.getElementById('f-model'); m.value = '%s'; m.dispatchEvent(new Event('change'));
        return ['heads', 'kv_heads', 'head_dim', 'window'].map((n) => document.getElementById('f-' + n).value).join(' ');
        })()""" % mistral["name"])
    assert filled == "%d %d %d %d" % (mistral["heads"], mistral["kv_heads"], mistral["head_dim"], mistral["window"])
    run_id = run_from_form(browser, {"backend": "reference", "device": "cpu", "batch": "1", "seq": "16",
                                     "head_dim": "8", "warmup": "0", "iters": "1", "seed": str(seed)})
    rec = api.get("/v1/runs/%d" % run_id).json()
    p = rec["params"]
    assert rec["model"]["name"] == mistral["name"] and rec["model"]["overridden"] == ["head_dim"], rec["model"]
    assert (p["heads"], p["kv_heads"], p["head_dim"], p["window"]) == (mistral["heads"], mistral["kv_heads"], 8,
                                                                       mistral["window"]), p
    shape = browser.wait_for("(() => { const tr = document.querySelector('#runs tbody tr[data-id=\"%d\"]');"
                             " return tr ? tr.querySelector('td.shape').textContent : ''; })()" % run_id,
                             "run %d in the table" % run_id)
    assert "Hkv%d" % mistral["kv_heads"] in shape and "W%d" % mistral["window"] in shape, shape


def test_empty_no_gpu_and_error_states(start_server, browser):
    # A fresh server with no history and no GPU: the page says so from its first paint, and
    # says what went wrong when the server stops answering.
    srv = start_server(extra=["--cpu-threads", "1"])
    browser.navigate(srv.url + "/")
    browser.wait_for("document.readyState === 'complete'", "the page")
    first = browser.eval("document.querySelector('#runs tbody').innerText.trim()")
    assert first in ("loading the history…", "no runs yet: start one with the form above, or POST /v1/runs"), first
    browser.wait_for("document.querySelector('#conn').textContent.startsWith('live')", "the first poll")
    assert browser.eval("document.querySelector('#runs tbody').innerText.trim()").startswith("no runs yet")
    assert browser.eval("document.querySelector('#chart-timing text.empty').textContent").startswith("no runs yet")
    note = browser.wait_for("(() => { const n = document.querySelector('#notice');"
                            " return !n.hidden && n.dataset.kind === 'info' ? n.textContent : ''; })()", "the no-GPU note")
    assert note.startswith("No GPU on this server")
    import requests
    # Its button fills in a run the cpu does at once (the API's default shape is too costly there).
    small = browser.eval("(() => { document.getElementById('small-cpu-run').click(); return formBody(); })()")
    assert small["device"] == "cpu" and small["backend"] == "reference" and small["seq"] <= 64, small
    r = requests.post(srv.url + "/v1/runs", json=dict(small, warmup=0, iters=1), timeout=60)
    assert r.status_code == 200 and r.json()["status"] == "done", r.text
    # A cpu run asked to profile has no kernel table: the chart says why, not "no profile".
    r = requests.post(srv.url + "/v1/runs", json={"backend": "reference", "device": "cpu", "batch": 1, "heads": 1,
                                                   "seq": 8, "head_dim": 8, "iters": 1, "warmup": 0,
                                                   "profile": True}, timeout=60)
    assert r.status_code == 200, r.text
    label = browser.wait_for("(() => { const t = document.querySelector('#chart-kernels text.value');"
                             " return t ? t.textContent : ''; })()", "the kernels chart label")
    assert label == "n/a (cpu run: no GPU kernels)", label
    # The server goes away: the header and the note say so.
    srv.stop_checked()
    browser.wait_for("document.querySelector('#conn').textContent.startsWith('disconnected: the server does not answer')",
                     "the disconnected state")
    assert browser.eval("document.querySelector('#conn').className") == "error"


# ---------------------------------------------------------------- the analyses: runs of a shape, history, links, flags

SHAPE = {"batch": 1, "heads": 3, "seq": 24, "head_dim": 8}   # this module's own shape: no other test makes it
SHAPE_TEXT = "B1 H3 Sq24 Skv24 D8 bf16 causal"
CALM = {"iters": 20, "warmup": 1, "target_noise": 0.99}      # 20 samples, well within the noise target


def _upload(api, name, arr):
    from attnd_api_helpers import npy_bytes
    r = api.post("/v1/tensors", params={"format": "npy", "device": "cpu", "name": name}, data=npy_bytes(arr),
                 headers={"Content-Type": "application/x-npy"})
    assert r.status_code == 201, r.text
    return r.json()["id"]


@pytest.fixture(scope="module")
def two_nodes():
    """One history written by two nodes in turn (one data_dir, --node alpha, then --node
    beta): runs of one shape on two setups, an fp16 twin, a run that missed its noise target
    and one that met it, and a run whose verify failed (its v holds an infinity). Yields the
    beta server (still running) and the records by name."""
    import numpy as np
    d = tempfile.mkdtemp(prefix="attnd-dash-")
    recs, srv = {}, None
    try:
        first = AttndServer(data_dir=d, extra=["--node", "alpha", "--cpu-threads", "1"]).start()
        try:
            api = Api(first.url)
            recs["alpha"] = [api.run_ok(**tiny(seed=s, tags="a", **SHAPE, **CALM)) for s in (1, 2)]
            first.stop_checked()
        finally:
            first.cleanup()
        srv = AttndServer(data_dir=d, extra=["--node", "beta", "--cpu-threads", "1"]).start()
        api = Api(srv.url)
        recs["beta"] = [api.run_ok(**tiny(seed=s, tags="b", **SHAPE, **CALM)) for s in (3, 4, 5)]
        recs["fp16"] = api.run_ok(**tiny(seed=6, dtype="fp16", **SHAPE, **CALM))
        recs["noisy"] = api.run_ok(**tiny(seed=7, iters=0, min_iters=3, max_iters=5, target_noise=1e-9, **SHAPE))
        recs["calm"] = api.run_ok(**tiny(seed=8, iters=0, min_iters=3, max_iters=100, target_noise=0.99, **SHAPE))
        q = (np.random.default_rng(5).standard_normal((1, 2, 16, 8))).astype(np.float16)
        v = q.copy()
        v[0, 1, 2, 3] = np.inf
        ids = {"q": _upload(api, "q", q), "k": _upload(api, "k", q), "v": _upload(api, "v", v)}
        recs["bad"] = api.run_ok(backend="reference", device="cpu", verify="true", iters=3, warmup=0, target_noise=0.99,
                                 **ids)
        assert recs["bad"]["verify"]["pass"] is False, recs["bad"]["verify"]
        assert recs["noisy"]["timing"]["rse"] > 1e-9 and recs["calm"]["timing"]["rse"] <= 0.99
        yield srv, recs
        srv.stop_checked()
    finally:
        if srv:
            srv.cleanup()
        shutil.rmtree(d, ignore_errors=True)


def _open(browser, url, ready="!!document.querySelector('#conn') && "
                               "document.querySelector('#conn').textContent.startsWith('live')"):
    browser.navigate("about:blank")
    browser.navigate(url)
    browser.wait_for(ready, "the page's first poll")


def _shape_runs(recs):
    return recs["alpha"] + recs["beta"] + [recs["noisy"], recs["calm"]]


def test_every_run_of_a_shape_is_drawn_per_setup_on_a_log_axis(two_nodes, browser):
    """Each bar was the newest run per backend: 12 runs of one shape were one bar, a run of
    another node replaced it, and a linear axis from 0 made 60 and 62 µs look the same. Now
    every run is a dot with its p10–p90, one row per setup, on a log axis."""
    srv, recs = two_nodes
    want = {r["id"]: r for r in _shape_runs(recs)}
    _open(browser, srv.url + "/#shape=" + quote(SHAPE_TEXT))
    browser.wait_for("document.querySelectorAll('#chart-timing circle.run').length === %d" % len(want),
                     "the %d runs of the shape in the chart" % len(want))
    marks = browser.eval("""[...document.querySelectorAll('#chart-timing circle.run')].map((c) => {
        const err = document.querySelector('#chart-timing line.err[data-run="' + c.dataset.run + '"]');
        return [Number(c.dataset.run), Number(c.getAttribute('cx')), c.closest('g.row').querySelector('text.label').textContent,
                err ? [Number(err.getAttribute('x1')), Number(err.getAttribute('x2'))] : null, c.getAttribute('class')]; })""")
    assert {m[0] for m in marks} == set(want), marks
    rows = {m[0]: m[2] for m in marks}
    assert {rows[r["id"]] for r in recs["alpha"]} == {"reference · alpha"}, rows
    assert {rows[r["id"]] for r in recs["beta"] + [recs["noisy"], recs["calm"]]} == {"reference · beta"}, rows
    assert browser.eval("document.querySelector('#chart-timing g.axis').dataset.scale") == "log"
    # Log axis: x = a + k·ln(t) for every median and every p10, p90 (the error bars).
    ids = sorted(want, key=lambda i: want[i]["timing"]["median_us"])
    lo, hi = ids[0], ids[-1]
    cx = {m[0]: m[1] for m in marks}
    k = (cx[hi] - cx[lo]) / (math.log(want[hi]["timing"]["median_us"]) - math.log(want[lo]["timing"]["median_us"]))
    a = cx[lo] - k * math.log(want[lo]["timing"]["median_us"])
    assert k > 0
    for m in marks:
        t = want[m[0]]["timing"]
        assert abs(a + k * math.log(t["median_us"]) - m[1]) < 0.6, (m, t["median_us"])
        assert m[3] and abs(a + k * math.log(t["p10_us"]) - m[3][0]) < 0.6 and abs(a + k * math.log(t["p90_us"]) - m[3][1]) < 0.6, m
    # The row's median of medians is its tall tick.
    beta = sorted(r["timing"]["median_us"] for r in recs["beta"] + [recs["noisy"], recs["calm"]])
    tick = browser.eval("Number(document.querySelector('#chart-timing g.row:nth-of-type(3) line.median, "
                        "#chart-timing g.row[data-key*=\"beta\"] line.median').dataset.median)")
    assert abs(tick - beta[len(beta) // 2]) < 1e-9 * beta[-1], (tick, beta)
    assert "noisy" in next(m[4] for m in marks if m[0] == recs["noisy"]["id"])
    assert "noisy" not in next(m[4] for m in marks if m[0] == recs["calm"]["id"])
    # The screenshot: run-blue dots in both rows, the noisy run's orange ring.
    png = browser.screenshot("#chart-timing", "dashboard-shape")
    bands = browser.eval("""[...document.querySelectorAll('#chart-timing g.row')].map((g) => {
        const s = document.querySelector('#chart-timing').getBoundingClientRect(), r = g.getBoundingClientRect();
        return [r.top - s.top, r.bottom - s.top]; })""")
    blue = png.where(RUN_BLUE)
    assert len(bands) == 2 and all(sum(1 for x, y in blue if b[0] <= y <= b[1]) >= 15 for b in bands), (bands, len(blue))
    assert len(png.where(NOISE_ORANGE, 30)) >= 5
    # 60 and 62 µs, beside a run of 600 µs (a tenfold axis): apart by more than a dot.
    probe = browser.eval("""(() => {
        const svg = svgEl('svg', {id: 'probe', width: 940, height: 100, class: 'chart'});
        document.body.prepend(svg);
        dotPlot(svg, [60, 62, 600].map((m, i) => ({key: 'k' + i, label: 'row ' + i,
            runs: [{id: i + 1, median: m, p10: m * 0.995, p90: m * 1.005}]})), {unit: 'µs'});
        return [...svg.querySelectorAll('circle.run')].map((c) => Number(c.getAttribute('cx'))); })()""")
    assert probe[1] - probe[0] >= 6, probe
    png = browser.screenshot("#probe")
    dots = sorted(min(x for x, _ in b) for b in blobs(png.where(RUN_BLUE, 20)) if len(b) >= 10)
    assert len(dots) == 3 and dots[1] - dots[0] >= 5, dots


def test_runs_table_and_detail_flag_verify_and_noise(two_nodes, browser):
    """Verify was invisible in the table, and a run that stopped on max_iters with an rse
    far above its target looked like any other."""
    srv, recs = two_nodes
    bad, noisy, calm = recs["bad"], recs["noisy"], recs["calm"]
    _open(browser, srv.url + "/")
    row = "document.querySelector('#runs tbody tr[data-id=\"%d\"]')"
    browser.wait_for("!!" + row % bad["id"], "the failed verify's row")
    cells = browser.eval("[%s, %s, %s].map((tr) => [tr.dataset.verify, tr.dataset.noise, tr.querySelector('td.verify')"
                         ".textContent, tr.querySelector('td.noise').textContent])"
                         % (row % bad["id"], row % noisy["id"], row % calm["id"]))
    assert cells[0][0] == "fail" and cells[0][2] == "✗ FAIL", cells
    assert cells[1][1] == "missed" and cells[1][3] == "⚠ " + noisy["timing"]["stop_reason"], cells
    assert cells[2][1] == "" and cells[2][3] == "", cells
    assert browser.eval("document.querySelector('#runs thead').textContent").count("verify") == 1
    flags = browser.eval("(() => { %s.click(); return document.querySelector('#d-flags').textContent; })()" % (row % bad["id"]))
    assert "verify failed" in flags, flags
    flags = browser.eval("(() => { %s.click(); return document.querySelector('#d-flags').textContent; })()" % (row % noisy["id"]))
    assert flags.startswith("⚠ noise target missed: rse") and "stopped: %s" % noisy["timing"]["stop_reason"] in flags, flags
    # The failed run's dot is red in its shape's chart, and red in the table's screenshot.
    browser.eval("(() => { const s = document.querySelector('#shape'); s.value = %s;"
                 " s.dispatchEvent(new Event('change')); })()" % json.dumps(browser.eval("%s.querySelector('td.shape')"
                                                                                          ".textContent" % (row % bad["id"]))))
    browser.wait_for("!!document.querySelector('#chart-timing circle.run.vfail[data-run=\"%d\"]')" % bad["id"],
                     "the failed run's red dot")
    assert len(browser.screenshot("#chart-timing").where(FAIL_RED)) >= 15
    assert len(browser.screenshot("#runs", "dashboard-runs").where(FAIL_RED)) >= 20


def test_deep_links_restore_the_view(two_nodes, browser):
    srv, recs = two_nodes
    run = recs["alpha"][0]["id"]
    _open(browser, srv.url + "/#run=%d&shape=%s" % (run, quote(SHAPE_TEXT)))
    browser.wait_for("!document.querySelector('#detail').hidden && document.querySelector('#detail').dataset.run === '%d'"
                     % run, "run %d's detail from #run=" % run)
    assert browser.eval("document.querySelector('#shape').value") == SHAPE_TEXT
    # Picking a run writes it into the URL; editing the URL shows another.
    other = recs["beta"][0]["id"]
    browser.eval("document.querySelector('#runs tbody tr[data-id=\"%d\"]').click()" % other)
    assert "run=%d" % other in browser.eval("location.hash")
    browser.eval("location.hash = '#run=%d'" % recs["calm"]["id"])
    browser.wait_for("document.querySelector('#detail').dataset.run === '%d'" % recs["calm"]["id"], "the hash's run")
    _open(browser, srv.url + "/#run=987654321")
    text = browser.wait_for("(() => { const t = document.querySelector('#d-id').textContent;"
                            " return t.includes('not found') ? t : ''; })()", "an unknown run said so")
    assert "404" in text, text
    _open(browser, srv.url + "/#study=424242")
    text = browser.wait_for("(() => { const t = document.querySelector('#s-status');"
                            " return t && t.textContent.startsWith('no study 424242') ? t.textContent : ''; })()",
                            "an unknown study said so")
    assert "404" in text, text


def test_history_view_filters_series_and_baseline(two_nodes, browser):
    """No trend, no filters, no baseline, no compare: a series (shape, backend, GPU) over time
    and commits, filtered as GET /v1/runs filters, with ratios to a chosen run or commit and
    each commit compared with it (GET /v1/compare)."""
    srv, recs = two_nodes
    shape_runs = _shape_runs(recs)
    gpu = recs["alpha"][0]["device"]["name"]
    commit = recs["alpha"][0]["build"]["commit"]
    series = "reference · %s · %s" % (gpu, SHAPE_TEXT)
    base = recs["alpha"][1]
    _open(browser, srv.url + "/#backend=reference&dtype=bf16&series=%s&base=run:%d" % (quote(series), base["id"]))
    browser.wait_for("document.querySelectorAll('#chart-history circle.run').length === %d" % len(shape_runs),
                     "the series' runs in the history chart")
    options = browser.eval("[...document.querySelectorAll('#h-series option')].map((o) => [o.value, o.textContent])")
    assert [o for o in options if o[0] == series][0][1].startswith(series + " — %d runs" % len(shape_runs)), options
    assert not any("fp16" in o[0] for o in options), "the dtype filter lets fp16 series through: %s" % options
    assert browser.eval("[document.querySelector('#h-backend').value, document.querySelector('#h-dtype').value,"
                        " document.querySelector('#h-series').value, document.querySelector('#h-base').value]") == \
        ["reference", "bf16", series, "run:%d" % base["id"]]
    values = dict(browser.eval("[...document.querySelectorAll('#chart-history circle.run')]"
                               ".map((c) => [Number(c.dataset.run), Number(c.dataset.value)])"))
    for r in shape_runs:
        assert abs(values[r["id"]] - r["timing"]["median_us"] / base["timing"]["median_us"]) < 1e-9, (r["id"], values)
    assert values[base["id"]] == 1
    # Each commit's runs against the baseline by GET /v1/compare: the server's ratio, its
    # interval and its verdict, in the commit's row.
    key, text = browser.wait_for("(() => { const td = document.querySelector('#h-commits td.compare');"
                                 " return td && td.dataset.verdict ? [td.dataset.compare, td.textContent] : ''; })()",
                                 "the commit's comparison with the baseline")
    side_base, side_run = key.split("|")
    assert side_base == str(base["id"]) and sorted(map(int, side_run.split(","))) == sorted(r["id"] for r in shape_runs)
    got = Api(srv.url).get("/v1/compare", params={"base": side_base, "run": side_run}).json()["rows"][0]
    shown = re.match(r"×([0-9.]+) \[([0-9.]+)–([0-9.]+)\] (.+?)( ⚠)?$", text)
    assert shown, text
    for i, name in enumerate(("ratio", "low", "high")):
        assert abs(float(shown.group(i + 1)) - got[name]) <= 0.0015, (text, got)
    assert shown.group(4) == got["verdict"], (text, got)
    assert browser.eval("document.querySelector('#h-base-note').textContent").startswith("ratios to run %d" % base["id"])
    assert browser.eval("document.querySelectorAll('#h-legend .legend').length") == 2   # alpha's and beta's setups
    commits = browser.eval("[...document.querySelectorAll('#h-commits tbody tr')].map((tr) =>"
                           " [...tr.children].map((td) => td.textContent))")
    assert len(commits) == 1 and commits[0][0] == commit and commits[0][1] == str(len(shape_runs)), commits
    png = browser.screenshot("#chart-history", "dashboard-history")
    assert len(png.where(RUN_BLUE)) >= 20 and png.colours() > 8
    # The commit as the baseline: its median of medians is 1.
    browser.eval("(() => { const s = document.querySelector('#h-base'); s.value = 'commit:%s';"
                 " s.dispatchEvent(new Event('change')); })()" % commit)
    assert browser.eval("document.querySelector('#h-commits tbody td.ratio').textContent") == "1.000"
    assert browser.eval("document.querySelector('#h-commits tbody td.compare').textContent") == "baseline"
    assert "base=commit" in browser.eval("location.hash")
    # A tag filter: only beta's tagged runs.
    browser.eval("(() => { const t = document.querySelector('#h-tag'); t.value = 'b';"
                 " t.dispatchEvent(new Event('change')); })()")
    browser.wait_for("document.querySelectorAll('#chart-history circle.run').length === 3", "the tag's three runs")
    got = browser.eval("[...document.querySelectorAll('#chart-history circle.run')].map((c) => Number(c.dataset.run))")
    assert sorted(got) == sorted(r["id"] for r in recs["beta"])
    assert "tag=b" in browser.eval("location.hash")


def test_history_keeps_paged_and_ragged_runs_apart(start_server, browser):
    """A paged cache and a ragged batch of one shape are series of their own (the groups say
    page_size and ragged), and each series draws its runs: mixed with the contiguous runs, a
    paged run's time would read as a change of the contiguous ones."""
    srv = start_server()
    api = Api(srv.url)
    base = dict(SHAPE, backend="reference", device="cpu", **CALM)
    plain = api.run_ok(**base)
    paged = [api.run_ok(**dict(base, page_size=4)) for _ in range(2)]
    ragged = api.run_ok(**dict(base, seqlens_q="24,12", seqlens_kv="24,20", batch=2))
    gpu = plain["device"]["name"]
    series = {
        "plain": "reference · %s · %s" % (gpu, SHAPE_TEXT),
        "paged": "reference · %s · %s P4" % (gpu, SHAPE_TEXT),
        "ragged": "reference · %s · %s ragged" % (gpu, SHAPE_TEXT.replace("B1", "B2")),
    }
    _open(browser, srv.url + "/#series=%s" % quote(series["paged"]))
    browser.wait_for("document.querySelectorAll('#chart-history circle.run').length === 2", "the paged series' runs")
    drawn = browser.eval("[...document.querySelectorAll('#chart-history circle.run')].map((c) => Number(c.dataset.run))")
    assert sorted(drawn) == sorted(r["id"] for r in paged), drawn
    options = dict(browser.eval("[...document.querySelectorAll('#h-series option')].map((o) => [o.value, o.textContent])"))
    for name, count in (("plain", 1), ("paged", 2), ("ragged", 1)):
        assert series[name] in options and options[series[name]].startswith(series[name] + " — %d run" % count), \
            (name, options)
    browser.eval("(() => { const s = document.querySelector('#h-series'); s.value = %s;"
                 " s.dispatchEvent(new Event('change')); })()" % json.dumps(series["ragged"]))
    browser.wait_for("document.querySelectorAll('#chart-history circle.run').length === 1", "the ragged series' run")
    assert browser.eval("Number(document.querySelector('#chart-history circle.run').dataset.run)") == ragged["id"]


def test_study_view(api, browser):
    """The profiling study's own form: bars with error bars on a log axis, kernels per
    forward, a stacked bar of the top kernels, the table. Runs once the server has
    POST /v1/studies (docs/api.md, Studies); on the cpu device the variant is reference."""
    if api.get("/v1/studies").status_code == 404:
        pytest.skip("this attnd has no GET /v1/studies yet: the study view's test runs once it has")
    r = api.post("/v1/studies", json={"variants": ["reference"], "device": "cpu", "batch": 1, "heads": 2, "seq": 32,
                                      "head_dim": 8, "rounds": 3, "iters": 20, "warmup": 1, "target_noise": 0.99})
    assert r.status_code == 202, r.text
    sid = r.json()["id"]
    deadline = time.monotonic() + 120
    while True:
        rec = api.get("/v1/studies/%d?wait=30" % sid, timeout=60).json()
        if rec["status"] in ("done", "failed", "cancelled") or time.monotonic() > deadline:
            break
    assert rec["status"] == "done", rec
    row = rec["table"][0]
    browser.navigate(api.url + "/#study=%d" % sid)
    browser.wait_for("!!document.querySelector('#study') && document.querySelector('#study').dataset.status === 'done'",
                     "study %d in the study view" % sid)
    bar = browser.eval("Number(document.querySelector('#s-timing rect.bar[data-key=\"reference\"]').dataset.median)")
    assert bar == row["median_us"]
    assert browser.eval("document.querySelector('#s-timing g.axis').dataset.scale") == "log"
    assert browser.eval("document.querySelectorAll('#s-timing circle.round').length") == 3
    assert browser.eval("!!document.querySelector('#s-timing line.err[data-key=\"reference\"]')")
    assert browser.eval("document.querySelector('#s-kernels text.value').textContent") == "n/a (cpu run: no GPU kernels)"
    assert browser.eval("document.querySelector('#s-top g.row[data-key=\"reference\"] text.value').textContent") \
        .startswith("n/a") == (not row["top_kernels"])
    cells = browser.eval("[...document.querySelector('#s-table tr[data-variant=\"reference\"]').children].map((td) => td.textContent)")
    assert cells[0].startswith("reference") and cells[1] == "done" and cells[2] == "3" and cells[5] == "baseline", cells
    png = browser.screenshot("#study", "dashboard-study")
    assert len(png.where(RUN_BLUE)) >= 200 and png.colours() > 10
