"""The HTTP front door under bad requests (server/front/http/http.c). Every refusal attnd makes is the
API's JSON error, {"error": {"code", "message", "field"}} with "field" null unless a
parameter is at fault; the few that libmicrohttpd answers itself, before attnd sees the
request, are answered and closed at once. Uploads (the streaming route) are refused before
any body byte is read, Expect: 100-continue included, and a chunked one is refused at
max_upload_bytes without its body piling up in the server; either way a client that sends its
whole body before reading gets the JSON answer (the rest of the body is read and thrown away).
"""
import json
import socket
import time

import pytest
import requests

from attnd_api_helpers import MemfdSampler, error_of, peak_rss_bytes, reset_peak_rss

PROMPT_S = 1.0  # a refusal, and the close that follows it, come within this
MAX_UPLOAD = 1 << 20


def port_of(url):
    return int(url.rsplit(":", 1)[1])


def read_to_close(s):
    """What s receives until the server closes it or it times out: (bytes, closed)."""
    got = b""
    while True:
        try:
            b = s.recv(65536)
        except socket.timeout:
            return got, False
        except ConnectionResetError:
            return got, True
        if not b:
            return got, True
        got += b


def exchange(url, data, wait_s=5.0):
    """Send data on a new connection and read until the server closes it (or wait_s).
    Returns (the bytes answered, seconds from the send to the close, closed)."""
    s = socket.create_connection(("127.0.0.1", port_of(url)), timeout=wait_s)
    try:
        t0 = time.monotonic()
        s.sendall(data)
        got, closed = read_to_close(s)
        return got, time.monotonic() - t0, closed
    finally:
        s.close()


def parse(answer):
    """(status, headers as a lower-case dict, body) of one HTTP/1.1 answer."""
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0].startswith(b"HTTP/1.1 "), answer[:200]
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower().decode()] = v.strip().decode()
    return int(lines[0].split(b" ")[1]), headers, body


def json_error(body):
    err = json.loads(body)["error"]
    assert set(err) == {"code", "message", "field"} and err["code"] and err["message"], err
    return err


def post(path, headers=(), body=b""):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\n" + b"".join(h + b"\r\n" for h in headers) + b"\r\n" + body)


MANY = b"&".join(b"p%d=1" % i for i in range(2000))

# name: (request, status, code, field). Answered by attnd: JSON, then closed.
JSON_REFUSALS = {
    "two Content-Length": (post(b"/v1/runs", [b"Content-Length: 2", b"Content-Length: 3"], b"{}"), 400,
                           "bad_header", None),
    "Content-Length and chunked": (post(b"/v1/runs", [b"Content-Length: 2", b"Transfer-Encoding: chunked"],
                                        b"2\r\n{}\r\n0\r\n\r\n"), 400, "bad_header", None),
    "Transfer-Encoding gzip": (post(b"/v1/runs", [b"Transfer-Encoding: gzip"], b"abc"), 400, "bad_header", None),
    "2000 query parameters": (b"GET /healthz?" + MANY + b" HTTP/1.1\r\nHost: x\r\n\r\n", 400, "too_many_parameters",
                              None),
    "101 query parameters": (b"GET /healthz?" + b"&".join(b"p%d=1" % i for i in range(101)) +
                             b" HTTP/1.1\r\nHost: x\r\n\r\n", 400, "too_many_parameters", None),
    "NUL in a query value": (post(b"/v1/runs?backend=reference&device=cpu&batch=1%00garbage"), 400, "bad_value",
                             "batch"),
    "NUL in the path": (b"GET /v1/runs/1%00x HTTP/1.1\r\nHost: x\r\n\r\n", 404, "not_found", None),
    "declared body over max_body_bytes": (post(b"/v1/runs", [b"Content-Length: 2000000"]), 413, "body_too_large",
                                          None),
    # Heads a proxy in front could frame another way (RFC 9112): refused, and the connection
    # closed, so that what follows is never read as a second request.
    "white space before a colon": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length : 33\r\n\r\n"
                                   b"GET /v1/runs HTTP/1.1\r\nHost: x\r\n\r\n", 400, "bad_header", None),
    "no Host in HTTP/1.1": (b"GET /healthz HTTP/1.1\r\n\r\n", 400, "bad_header", None),
    "two Host headers": (b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, "bad_header", None),
    "bare LF after the request line": (b"GET /healthz HTTP/1.1\nHost: x\r\n\r\n", 400, "bad_header", None),
    "bare LF between headers": (b"GET /healthz HTTP/1.1\r\nHost: x\nX-A: 1\r\n\r\n", 400, "bad_header", None),
    "bare CR in a header": (b"GET /healthz HTTP/1.1\r\nHost: x\rX-A: 1\r\n\r\n", 400, "bad_header", None),
    "folded header": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: one\r\n two\r\nX-B: 1\r\n\r\n", 400,
                      "bad_header", None),
    "folded last header": (b"GET /healthz HTTP/1.1\r\nX-B: 1\r\nHost: x\r\n\ty\r\n\r\n", 400, "bad_header", None),
}

# Answered by libmicrohttpd before attnd sees the request (its HTML, then closed).
MHD_REFUSALS = {
    "Content-Length -1": (post(b"/v1/runs", [b"Content-Length: -1"]), 400),
    "Content-Length 2^64": (post(b"/v1/runs", [b"Content-Length: 18446744073709551616"]), 413),
    "oversized chunk size": (post(b"/v1/runs", [b"Transfer-Encoding: chunked"], b"FFFFFFFFFFFFFFFFFF\r\nab"), 413),
    "bad chunk": (post(b"/v1/runs", [b"Transfer-Encoding: chunked"], b"zz\r\nab\r\n"), 400),
    # A chunk line longer than the connection's pool: libmicrohttpd's own 500 page (0.9.75).
    "chunk extension of 200 KB": (post(b"/v1/runs", [b"Transfer-Encoding: chunked"],
                                       b"2;e=" + b"a" * 200000 + b"\r\n{}\r\n0\r\n\r\n"), 500),
    "URL of 200 KB": (b"GET /v1/runs/" + b"9" * 200000 + b" HTTP/1.1\r\nHost: x\r\n\r\n", 414),
    "headers of 200 KB": (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200000 + b"\r\n\r\n", 431),
}


@pytest.mark.parametrize("name", sorted(JSON_REFUSALS))
def test_refusal_is_json_and_prompt(server, name):
    data, status, code, field = JSON_REFUSALS[name]
    answer, secs, closed = exchange(server.url, data)
    got, headers, body = parse(answer)
    assert got == status, (name, answer[:300])
    assert headers.get("content-type") == "application/json", headers
    err = json_error(body)
    assert err["code"] == code and err["field"] == field, err
    assert closed and secs < PROMPT_S, (name, closed, secs)


@pytest.mark.parametrize("piece", [1, 7, 4096])
def test_heads_in_pieces_pass_the_line_checks(server, piece):
    """The line checks read libmicrohttpd's buffer: a good head served whole or a byte at a
    time, with many headers, white space after values and empty values, is answered 200."""
    head = (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Empty:\r\nX-Spaces:   \r\nX-Tight:v\r\n" +
            b"".join(b"X-H%d: value %d  \r\n" % (i, i) for i in range(300)) + b"Connection: close\r\n\r\n")
    s = socket.create_connection(("127.0.0.1", port_of(server.url)), timeout=10)
    try:
        for i in range(0, len(head), piece):
            s.sendall(head[i:i + piece])
        got, _ = read_to_close(s)
    finally:
        s.close()
    assert got.startswith(b"HTTP/1.1 200"), got[:300]


def test_http_1_0_needs_no_host(server):
    answer, _, _ = exchange(server.url, b"GET /healthz HTTP/1.0\r\n\r\n")
    assert answer.startswith(b"HTTP/1.") and parse(answer.replace(b"HTTP/1.0", b"HTTP/1.1", 1))[0] == 200, answer[:200]


def test_framing_refused_before_auth(start_server, tmp_path):
    """A head framed two ways is the same refusal with or without a token: it says nothing
    about the token, and the connection closes either way."""
    tokens = tmp_path / "tokens"
    tokens.write_text("s3cret\n")
    srv = start_server(extra=["--token-file", str(tokens), "--cpu-threads", "1"])
    answer, secs, closed = exchange(srv.url, b"GET /v1/runs HTTP/1.1\r\nHost: x\r\nX-A : 1\r\n\r\n")
    status, headers, body = parse(answer)
    assert status == 400 and json_error(body)["code"] == "bad_header", answer[:300]
    assert headers.get("connection") == "close" and closed and secs < PROMPT_S


def test_refusal_messages_name_the_limit(server):
    answer, _, _ = exchange(server.url, JSON_REFUSALS["declared body over max_body_bytes"][0])
    assert "max_body_bytes" in json_error(parse(answer)[2])["message"]
    answer, _, _ = exchange(server.url, JSON_REFUSALS["2000 query parameters"][0])
    assert "100" in json_error(parse(answer)[2])["message"]


def test_query_parameters_up_to_the_bound_pass(api):
    r = api.get("/healthz?" + "&".join("p%d=1" % i for i in range(100)))
    assert r.status_code == 200, r.text[:300]


@pytest.mark.parametrize("name", sorted(MHD_REFUSALS))
def test_refusal_by_libmicrohttpd_is_prompt(server, api, name):
    data, status = MHD_REFUSALS[name]
    answer, secs, closed = exchange(server.url, data)
    got, headers, _ = parse(answer)
    assert got == status and headers.get("connection") == "close", (name, answer[:300])
    assert closed and secs < PROMPT_S, (name, closed, secs)
    assert api.get("/healthz").status_code == 200


@pytest.fixture
def upload_server(start_server):
    return start_server(extra=["--max-upload-bytes", str(MAX_UPLOAD), "--cpu-threads", "1"])


def upload_head(length_header, expect=False, shape=2621440):
    return post(b"/v1/tensors?device=cpu&dtype=fp32&shape=%d" % shape,
                [length_header] + ([b"Expect: 100-continue"] if expect else []))


@pytest.mark.parametrize("expect", [True, False], ids=["expect-100-continue", "plain"])
def test_upload_over_max_upload_bytes_refused_before_its_body(upload_server, expect):
    """A declared 10 MiB upload against max_upload_bytes 1 MiB: 413 JSON naming
    max_upload_bytes as soon as the head is in; no 100 Continue; not a body byte sent."""
    answer, secs, closed = exchange(upload_server.url, upload_head(b"Content-Length: 10485760", expect))
    assert b"100 Continue" not in answer, answer[:300]
    status, _, body = parse(answer)
    err = json_error(body)
    assert status == 413 and err["code"] == "body_too_large" and err["field"] is None, answer[:300]
    assert "max_upload_bytes" in err["message"] and str(MAX_UPLOAD) in err["message"], err
    assert closed and secs < PROMPT_S, (closed, secs)


def test_upload_within_max_upload_bytes_gets_100_continue(upload_server):
    """At the limit, Expect: 100-continue is answered 100, and the upload then stored."""
    s = socket.create_connection(("127.0.0.1", port_of(upload_server.url)), timeout=10)
    try:
        s.sendall(upload_head(b"Content-Length: %d" % MAX_UPLOAD, expect=True, shape=MAX_UPLOAD // 4))
        interim = s.recv(65536)
        assert interim.startswith(b"HTTP/1.1 100 Continue"), interim[:200]
        s.sendall(b"\0" * MAX_UPLOAD)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.rstrip().endswith(b"}"):
            b = s.recv(65536)
            if not b:
                break
            answer += b
    finally:
        s.close()
    status, _, body = parse(answer)
    assert status == 201, answer[:500]


def chunked_upload(url, total, piece=64 << 10, end=True, head=None):
    """Send a chunked upload (or head, chunked) of total bytes of zeros (and its last chunk
    when end); read the answer. Returns (answer bytes, body bytes sent, seconds)."""
    s = socket.create_connection(("127.0.0.1", port_of(url)), timeout=20)
    data, sent = b"\0" * piece, 0
    t0 = time.monotonic()
    try:
        s.sendall(head or upload_head(b"Transfer-Encoding: chunked\r\nConnection: close", shape=16 << 20))
        while sent < total:
            s.sendall(b"%x\r\n" % len(data) + data + b"\r\n")
            sent += len(data)
        if end:
            s.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass
    try:
        got, _ = read_to_close(s)
    finally:
        s.close()
    return got, sent, time.monotonic() - t0


def test_chunked_upload_past_max_upload_bytes_is_answered(upload_server):
    """A chunked upload of 64 MiB against max_upload_bytes 1 MiB: past 1 MiB its memory goes,
    the rest is read and thrown away, and the client that sent it all reads the 413 JSON. The
    server never holds much more than 1 MiB of it."""
    srv = upload_server
    pid = srv.proc.pid
    reset_peak_rss(pid)
    rss0 = peak_rss_bytes(pid)
    with MemfdSampler(pid, interval_s=0.002) as mem:
        answer, sent, secs = chunked_upload(srv.url, 64 << 20)
    status, _, body = parse(answer)
    assert status == 413 and json_error(body)["code"] == "body_too_large", answer[:300]
    assert sent == 64 << 20 and secs < 20, (sent, secs)
    assert mem.peak_memfd <= MAX_UPLOAD + (256 << 10), mem.peak_memfd
    assert peak_rss_bytes(pid) - rss0 < (16 << 20), (rss0, peak_rss_bytes(pid))
    # the server goes on, and the refused upload left nothing behind
    r = requests.post(srv.url + "/v1/tensors", params={"device": "cpu", "dtype": "fp32", "shape": "4"},
                      data=b"\0" * 16, timeout=30)
    assert r.status_code == 201, r.text[:300]
    listed = requests.get(srv.url + "/v1/tensors", timeout=10).json()["tensors"]
    assert [t["id"] for t in listed] == [r.json()["id"]], listed
    print("chunked upload of 64 MiB refused past 1 MiB and answered in %.3f s; peak memfd %.2f MiB"
          % (secs, mem.peak_memfd / 2 ** 20))


@pytest.mark.parametrize("route", ["upload", "run"])
def test_refused_body_is_thrown_away_up_to_a_bound(upload_server, route):
    """What is thrown away is bounded: past 1 GiB of a refused body (a streamed upload past
    max_upload_bytes, a held run body past max_body_bytes) the connection is closed without
    an answer, the log says why, and the request is counted."""
    head = None if route == "upload" else post(b"/v1/runs", [b"Transfer-Encoding: chunked", b"Connection: close"])
    answer, sent, secs = chunked_upload(upload_server.url, (1 << 30) + (64 << 20), piece=1 << 20, end=False,
                                        head=head)
    assert answer == b"" and sent < (1 << 30) + (64 << 20), (answer[:200], sent)
    log = [ln for ln in upload_server.stderr_text().splitlines() if "body cut off after" in ln]
    assert log and "413 body_too_large" in log[-1], log
    assert requests.get(upload_server.url + "/healthz", timeout=10).status_code == 200
    metrics = requests.get(upload_server.url + "/metrics", timeout=10).text
    assert 'status="413"' in metrics, metrics[-800:]


CLIENTS = {
    # Python's urllib and requests send the whole body before they read; curl from a pipe
    # sends a chunked body.
    "urllib": "import sys, urllib.request, urllib.error\n"
              "req = urllib.request.Request(sys.argv[1], data=b'\\0' * int(sys.argv[2]), method='POST')\n"
              "try:\n    print(urllib.request.urlopen(req, timeout=60).status)\n"
              "except urllib.error.HTTPError as e:\n    print(e.code, e.read().decode())\n",
    "requests": "import sys, requests\n"
                "r = requests.post(sys.argv[1], data=b'\\0' * int(sys.argv[2]), timeout=60)\n"
                "print(r.status_code, r.text)\n",
}


@pytest.mark.parametrize("client", ["urllib", "requests", "curl -T - from a pipe"])
@pytest.mark.parametrize("limit", ["max_upload_bytes", "memory budget"])
def test_refused_upload_reaches_every_client(start_server, client, limit):
    """An upload refused from its head (declared) or mid-body (chunked) is answered with its
    JSON to clients that send the whole body before reading: the connection lingers."""
    import subprocess
    import sys
    extra = (["--max-upload-bytes", str(MAX_UPLOAD)] if limit == "max_upload_bytes"
             else ["--memory-budget-bytes", str(MAX_UPLOAD)])
    srv = start_server(extra=extra + ["--cpu-threads", "1"])
    size = 48 << 20
    url = srv.url + "/v1/tensors?device=cpu&dtype=fp32&shape=%d" % (size // 4)
    if client in CLIENTS:
        cmd = [sys.executable, "-c", CLIENTS[client], url, str(size)]
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    else:
        out = subprocess.run("head -c %d /dev/zero | curl -sS -X POST -T - '%s'" % (size, url), shell=True,
                             capture_output=True, text=True, timeout=120)
    want = 413 if limit == "max_upload_bytes" else 507
    assert out.returncode == 0, (out.stdout[-300:], out.stderr[-600:])
    text = out.stdout.strip()
    if client in CLIENTS:
        status, _, text = text.partition(" ")
        assert int(status) == want, out.stdout[:300]
    err = json.loads(text)["error"]
    assert err["code"] == ("body_too_large" if want == 413 else "insufficient_storage"), err
    assert requests.get(srv.url + "/healthz", timeout=10).status_code == 200


def test_error_answers_have_field_null(api):
    """Errors not about one parameter carry "field": null, never ""."""
    for r in (api.get("/no/such/path"), api.request("DELETE", "/healthz"),
              api.post("/v1/runs", data=b" " * (2 << 20))):
        assert r.status_code in (404, 405, 413), r.text[:200]
        assert error_of(r)["field"] is None, r.text[:300]
