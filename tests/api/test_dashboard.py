"""The dashboard (GET /, clients/dashboard) in a real headless Chromium against a real attnd on
the cpu device, driven through the DevTools protocol (websocket-client): the test fills the
form, clicks Run, and waits until the run it started is in the table and in the chart. Also:
static files are served with their types, and nothing outside the directory can be reached.

Skipped (with the reason) when no chromium binary is installed: scripts/install-deps.sh
installs Debian's `chromium` package in CI.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

from attnd_api_helpers import HTTP_TIMEOUT_S

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
        self.console = []

    def _call(self, ws, method, params=None):
        self.next_id += 1
        mid = self.next_id
        ws.send(json.dumps({"id": mid, "method": method, "params": params or {}}))
        while True:
            msg = json.loads(ws.recv())
            if msg.get("method") == "Runtime.exceptionThrown":
                self.console.append(json.dumps(msg["params"])[:500])
            if msg.get("id") == mid:
                if "error" in msg:
                    raise AssertionError("%s: %s" % (method, msg["error"]))
                return msg.get("result", {})

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


def test_form_run_appears_in_table_and_chart(api, browser):
    seed = int(time.time() * 1000) % 1000000007   # marks the run as the one the form started
    browser.navigate(api.url + "/")
    browser.wait_for("document.readyState === 'complete' && !!document.querySelector('#f-backend option[value=reference]')",
                     "the page and its backend list")
    browser.wait_for("document.querySelector('#conn').textContent.startsWith('live')", "the first poll")
    # Fill the form as a person would, then click Run.
    browser.eval("""(() => {
        const set = (id, v) => { const e = document.getElementById(id); e.value = v; e.dispatchEvent(new Event('input')); };
        set('f-backend', 'reference'); set('f-device', 'cpu'); set('f-batch', '1'); set('f-heads', '2');
        set('f-seq', '16'); set('f-head_dim', '8'); set('f-warmup', '0'); set('f-iters', '1'); set('f-seed', '%d');
        document.getElementById('f-submit').click();
        return true; })()""" % seed)
    run_id = browser.wait_for("document.querySelector('#form-status').dataset.runId || ''", "the 202 of the form's run")
    run_id = int(run_id)
    # The server has it, with the form's parameters.
    rec = api.get("/v1/runs/%d" % run_id).json()
    assert rec["backend"] == "reference" and rec["params"]["seed"] == seed, rec
    # The table shows it as done, and the timing chart has its bar.
    browser.wait_for("(() => { const tr = document.querySelector('#runs tbody tr[data-id=\"%d\"]');"
                     " return tr && tr.dataset.status === 'done'; })()" % run_id, "run %d done in the table" % run_id)
    node = browser.eval("document.querySelector('#runs tbody tr[data-id=\"%d\"] td.node').textContent" % run_id)
    assert node == rec["node"] and node, (node, rec.get("node"))
    bar = browser.wait_for("(() => { const b = document.querySelector('#chart-timing rect.bar[data-run=\"%d\"]');"
                           " return b ? b.getAttribute('data-backend') + ' ' + b.getAttribute('width') : ''; })()" % run_id,
                           "run %d in the timing chart" % run_id)
    assert bar.split()[0] == "reference" and float(bar.split()[1]) > 0, bar
    # Its detail: clicking the row shows the run, its verify, and no trace link (a cpu run
    # has no trace: the link would lead to a 404).
    shown = browser.eval("(() => { document.querySelector('#runs tbody tr[data-id=\"%d\"]').click();"
                         " return [document.querySelector('#d-trace').hidden,"
                         " JSON.parse(document.querySelector('#d-summary').textContent)]; })()" % run_id)
    assert shown[0] is True and "verify" in shown[1], shown
    assert api.get("/v1/runs/%d/trace" % run_id).status_code == 404


def test_form_defaults_are_the_servers(api, browser):
    """warmup and iters start empty: a run from the form is timed by the server's stopping
    rule, as the API's would be, not by one forward."""
    browser.navigate(api.url + "/")
    browser.wait_for("document.readyState === 'complete'", "the page")
    vals = browser.eval("['f-warmup', 'f-iters'].map((id) => document.getElementById(id).value).join(',')")
    assert vals == ",", vals
    body = browser.eval("JSON.stringify(formBody())")
    assert "warmup" not in json.loads(body) and "iters" not in json.loads(body), body


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
    browser.eval("""(() => {
        const set = (id, v) => { const e = document.getElementById(id); e.value = v; e.dispatchEvent(new Event('input')); };
        set('f-backend', 'reference'); set('f-device', 'cpu'); set('f-batch', '1'); set('f-seq', '16');
        set('f-head_dim', '8'); set('f-warmup', '0'); set('f-iters', '1'); set('f-seed', '%d');
        document.getElementById('f-submit').click();
        return true; })()""" % seed)
    run_id = int(browser.wait_for("document.querySelector('#form-status').dataset.runId || ''", "the form's run"))
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
    # A cpu run asked to profile has no kernel table: the chart says why, not "no profile".
    import requests
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
