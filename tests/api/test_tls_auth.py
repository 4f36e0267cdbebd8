"""Hardening: bearer tokens (token_file, public_reads), optional TLS (tls_cert_file,
tls_key_file) with a self-signed certificate made here by openssl."""
import os
import re
import shutil
import signal
import subprocess
import tempfile

import pytest
import requests

from attnd_api_helpers import REPO, attnd_bin, error_of, tiny

TOKEN = "tok-3f9a1c27e5b84d06"


@pytest.fixture
def tmpdir_own():
    d = tempfile.mkdtemp(prefix="attnd-sec-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def write(path, text):
    with open(path, "w") as f:
        f.write(text)
    return path


def start_fails(args, tmpdir, code=2):
    """Start attnd with args; it must exit with code at once (2: a bad setting, checked
    before anything starts; 1: TLS files, read when HTTP starts). Returns its stderr."""
    p = subprocess.run([attnd_bin(), "--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmpdir, "d"),
                        "--devices", "none"] + args, capture_output=True, text=True, timeout=30, cwd=REPO)
    assert p.returncode == code, (p.returncode, p.stdout, p.stderr)
    return p.stderr


def unauthorized(r):
    assert r.status_code == 401, (r.status_code, r.text[:300])
    assert r.headers.get("WWW-Authenticate", "").startswith("Bearer"), r.headers
    assert error_of(r)["code"] == "unauthorized"


def test_tokens_required(start_server, tmpdir_own):
    path = write(os.path.join(tmpdir_own, "tokens"), "# comment\n\n  %s  \nsecond-token\n" % TOKEN)
    srv = start_server(extra=["--token-file", path, "--cpu-threads", "2"])
    u = srv.url
    # probes never need a token
    assert requests.get(u + "/healthz", timeout=10).status_code == 200
    assert requests.get(u + "/readyz", timeout=10).json()["ready"] is True
    unauthorized(requests.get(u + "/v1/device", timeout=10))
    unauthorized(requests.get(u + "/v1/variants", headers={"Authorization": "Bearer wrong"}, timeout=10))
    unauthorized(requests.get(u + "/v1/variants", headers={"Authorization": "Bearer " + TOKEN[:-1]}, timeout=10))
    unauthorized(requests.get(u + "/v1/variants", headers={"Authorization": "Bearer " + TOKEN + "x"}, timeout=10))
    unauthorized(requests.get(u + "/v1/variants", headers={"Authorization": "Basic " + TOKEN}, timeout=10))
    unauthorized(requests.post(u + "/v1/runs", params=tiny(), timeout=60))
    unauthorized(requests.get(u + "/no/such/path", timeout=10))  # no probing of routes without a token
    for tok in (TOKEN, "second-token"):
        h = {"Authorization": "Bearer " + tok}
        assert requests.get(u + "/v1/variants", headers=h, timeout=10).status_code == 200
        r = requests.post(u + "/v1/runs", params=tiny(), headers=h, timeout=60)
        assert r.status_code == 200, r.text[:500]
        assert requests.get(u + "/v1/runs/%d" % r.json()["id"], headers=h, timeout=10).status_code == 200


def test_public_reads(start_server, tmpdir_own):
    path = write(os.path.join(tmpdir_own, "tokens"), TOKEN + "\n")
    srv = start_server(extra=["--token-file", path, "--public-reads", "true", "--cpu-threads", "2"])
    u = srv.url
    assert requests.get(u + "/v1/variants", timeout=10).status_code == 200
    assert requests.head(u + "/v1/device", timeout=10).status_code == 200
    unauthorized(requests.post(u + "/v1/runs", params=tiny(), timeout=60))
    r = requests.post(u + "/v1/runs", params=tiny(), headers={"Authorization": "Bearer " + TOKEN}, timeout=60)
    assert r.status_code == 200
    assert requests.get(u + "/v1/runs/%d" % r.json()["id"], timeout=10).status_code == 200


def test_no_token_file_means_open(api):
    assert api.get("/v1/variants").status_code == 200


def test_bad_token_files_stop_the_start(tmpdir_own):
    err = start_fails(["--token-file", os.path.join(tmpdir_own, "missing")], tmpdir_own)
    assert "token_file" in err and "missing" in err
    empty = write(os.path.join(tmpdir_own, "empty"), "# only a comment\n\n")
    assert "no token" in start_fails(["--token-file", empty], tmpdir_own)


def openssl_cert(d):
    if not shutil.which("openssl"):
        pytest.skip("openssl is not installed (scripts/install-deps.sh installs it)")
    cert, key = os.path.join(d, "cert.pem"), os.path.join(d, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def test_tls(tmpdir_own):
    cert, key = openssl_cert(tmpdir_own)
    tokens = write(os.path.join(tmpdir_own, "tokens"), TOKEN + "\n")
    argv = [attnd_bin(), "--listen", "127.0.0.1:0", "--data-dir", os.path.join(tmpdir_own, "d"), "--devices",
            "none", "--log-level", "warn", "--cpu-threads", "2", "--tls-cert-file", cert, "--tls-key-file", key,
            "--token-file", tokens]
    errf = open(os.path.join(tmpdir_own, "stderr"), "wb")
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errf, text=True, cwd=REPO)
    try:
        line = p.stdout.readline()
        m = re.match(r"^attnd listening on (https://127\.0\.0\.1:\d+)\s*$", line)
        assert m, (line, open(os.path.join(tmpdir_own, "stderr")).read())
        u = m.group(1)
        h = {"Authorization": "Bearer " + TOKEN}
        assert requests.get(u + "/healthz", verify=cert, timeout=10).json() == {"status": "ok"}
        r = requests.post(u + "/v1/runs", params=tiny(), headers=h, verify=cert, timeout=60)
        assert r.status_code == 200 and r.json()["status"] == "done", r.text[:500]
        unauthorized(requests.get(u + "/v1/device", verify=cert, timeout=10))
        with pytest.raises(requests.exceptions.SSLError):
            requests.get(u + "/healthz", timeout=10)  # self-signed: refused without the CA
        with pytest.raises(requests.RequestException):
            requests.get(u.replace("https://", "http://") + "/healthz", timeout=5)  # plain HTTP is no answer
        assert requests.get(u + "/readyz", verify=cert, timeout=10).status_code == 200  # still serving
    finally:
        p.send_signal(signal.SIGTERM)
        try:
            rc = p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            rc = None
        errf.close()
    assert rc == 0


def test_tls_needs_both_files(tmpdir_own):
    cert, key = openssl_cert(tmpdir_own)
    assert "tls_key_file" in start_fails(["--tls-cert-file", cert], tmpdir_own, code=1)
    assert "not a PEM" in start_fails(["--tls-cert-file", write(os.path.join(tmpdir_own, "x"), "junk"),
                                       "--tls-key-file", key], tmpdir_own, code=1)


def test_unauthorized_body_is_not_read(start_server, tmpdir_own):
    """Without a valid token a large body is answered 401 before it is read (an upload must
    not stream into the server unauthenticated)."""
    import socket
    import time
    path = write(os.path.join(tmpdir_own, "tokens"), TOKEN + "\n")
    srv = start_server(extra=["--token-file", path, "--cpu-threads", "2"])
    host, port = srv.url.replace("http://", "").rsplit(":", 1)
    for route in ("/v1/tensors?format=raw&dtype=fp32&shape=268435456", "/v1/runs"):
        s = socket.create_connection((host, int(port)), timeout=10)
        s.sendall(("POST %s HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n" % route).encode())
        t0 = time.monotonic()
        ans = b""
        while b"\r\n\r\n" not in ans:
            chunk = s.recv(4096)
            if not chunk:
                break
            ans += chunk
        s.close()
        assert ans.startswith(b"HTTP/1.1 401"), (route, ans[:200])
        assert time.monotonic() - t0 < 5
    assert requests.get(srv.url + "/healthz", timeout=10).status_code == 200
