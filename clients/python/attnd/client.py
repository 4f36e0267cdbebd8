"""attnd.Client: one attnd server over HTTP (docs/api.md), with requests.

Contracts:
- Every method answers the server's JSON (dicts and lists as the server sent them), except
  ready() (a bool) and download() (a numpy array).
- A refusal (any 4xx/5xx with {"error": {...}}) raises AttndError with the server's status,
  code, message and field. A run that was accepted and then failed (500 + a record whose
  status is "failed") raises AttndError too, with .record set, unless check=False.
- A connection failure or a timeout raises AttndError with status 0 and code
  "connection_error" / "timeout": callers catch one exception type.
"""
import io
import os
import time
import urllib.parse

import numpy as np
import requests
from requests.adapters import HTTPAdapter
from urllib3.util.retry import Retry

DEFAULT_URL = "http://127.0.0.1:8080"
TERMINAL_STATUSES = ("done", "failed", "cancelled")
# A JSON number is a double to most readers (the server's cJSON too): integers beyond this
# travel as strings, which the server reads exactly (seeds go up to 2**64 - 1).
JSON_SAFE_INT = 2**53 - 1
RETRY_AFTER_MAX_S = 60.0


class AttndError(Exception):
    """A refusal or failure, as the server described it.

    status   HTTP status (0 when the server could not be reached)
    code     the server's error code ("out_of_range", "queue_full", ...)
    message  the server's message
    field    the parameter at fault, or None
    body     the whole JSON answer (or None), record: a failed run's record (or None)
    retry_after  seconds from Retry-After on 429/503, or None
    """

    def __init__(self, status, code, message, field=None, body=None, record=None, retry_after=None):
        self.status = status
        self.code = code
        self.message = message
        self.field = field or None
        self.body = body
        self.record = record
        self.retry_after = retry_after
        where = " (field %s)" % self.field if self.field else ""
        super().__init__("%s %s: %s%s" % (status, code, message, where))


class _CappedRetry(Retry):
    """urllib3's Retry, with a server's Retry-After waited for at most RETRY_AFTER_MAX_S."""

    def get_retry_after(self, response):
        seconds = super().get_retry_after(response)
        return None if seconds is None else min(seconds, RETRY_AFTER_MAX_S)


def _retry_after(resp):
    try:
        return float(resp.headers.get("Retry-After"))
    except (TypeError, ValueError):
        return None


def _error_from_response(resp):
    """The AttndError of a refusal answer."""
    try:
        body = resp.json()
    except ValueError:
        body = None
    err = body.get("error") if isinstance(body, dict) else None
    record = None
    if isinstance(body, dict) and body.get("status") in ("failed", "cancelled") and "id" in body:
        record = body  # a run that ran and broke: its record carries the reason
    if isinstance(err, dict):
        return AttndError(resp.status_code, err.get("code") or "error", err.get("message") or "",
                          err.get("field"), body, record, _retry_after(resp))
    text = (resp.text or "").strip()[:500]
    return AttndError(resp.status_code, "http_error", text or resp.reason or "no message", None, body, record,
                      _retry_after(resp))


def _to_npy(tensor):
    """(npy bytes, attnd dtype or None) of a numpy array or a torch tensor. bf16 travels as
    uint16 bits with dtype=bf16 (numpy has no bf16)."""
    dtype = None
    if hasattr(tensor, "detach") and hasattr(tensor, "cpu"):  # torch.Tensor, without importing torch
        t = tensor.detach().cpu().contiguous()
        if str(t.dtype) == "torch.bfloat16":
            import torch  # only reached when the caller already has torch

            arr = t.view(torch.int16).numpy().view(np.uint16)
            dtype = "bf16"
        else:
            arr = t.numpy()
    else:
        arr = np.asarray(tensor)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    arr = np.ascontiguousarray(arr)
    if dtype is None:
        dtype = {np.dtype("float32"): "fp32", np.dtype("float16"): "fp16"}.get(arr.dtype)
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue(), dtype


def _plain(v):
    """v with numpy scalars (np.int64(4096), np.bool_(True), …) as Python's, in lists too: what
    a sweep over np.arange or a DataFrame hands the client; json cannot write them."""
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if type(v).__module__ == "numpy" and hasattr(v, "item") and getattr(v, "ndim", 0) == 0:
        return v.item()
    return v


def _tid(tensor_id):
    """A tensor id ("t4", or a description dict) as a URL path segment."""
    if isinstance(tensor_id, dict):
        tensor_id = tensor_id["id"]
    return urllib.parse.quote(str(tensor_id), safe="")


class Client:
    """One attnd server.

    url      base URL, e.g. http://127.0.0.1:8080 (default: $ATTND_URL or that)
    token    bearer token (default: $ATTND_TOKEN; None: no Authorization header)
    timeout  seconds for one HTTP exchange (a synchronous run included)
    verify   TLS: True (system CAs), False, or a CA bundle path (a self-signed server)
    retry_429  how many times to retry a 429 queue_full after its Retry-After (default 0)
    retry_connect  how many times to retry a connection that could not be made (default 0):
             nothing was sent, so a POST is safe to repeat; a request cut off after it was
             sent is never retried (the run may have been queued)
    Both retries are urllib3's Retry, mounted on the session's adapters.
    """

    def __init__(self, url=None, token=None, timeout=600.0, verify=True, retry_429=0, session=None,
                 retry_connect=0):
        self.url = (url or os.environ.get("ATTND_URL") or DEFAULT_URL).rstrip("/")
        self.token = token if token is not None else os.environ.get("ATTND_TOKEN") or None
        self.timeout = timeout
        self.verify = verify
        self.retry_429 = retry_429
        self.retry_connect = retry_connect
        self.session = session or requests.Session()
        if retry_429 or retry_connect:
            self._mount_retries()
        if self.token:
            self.session.headers["Authorization"] = "Bearer " + self.token

    def _mount_retries(self):
        # 429 means the server refused before queueing: any method may repeat it, after the
        # server's Retry-After. raise_on_status=False: the last 429 comes back as an answer
        # (and becomes AttndError with its code), not as urllib3's MaxRetryError.
        retry = _CappedRetry(total=None, connect=self.retry_connect, read=0, redirect=0, other=0,
                             status=self.retry_429, status_forcelist=(429,) if self.retry_429 else (),
                             allowed_methods=None, respect_retry_after_header=True, raise_on_status=False,
                             backoff_factor=0.5, backoff_max=RETRY_AFTER_MAX_S)
        adapter = HTTPAdapter(max_retries=retry)
        self.session.mount("http://", adapter)
        self.session.mount("https://", adapter)

    def __repr__(self):
        return "attnd.Client(%r)" % self.url

    # -------------------------------------------------------------------- plumbing --
    def request(self, method, path, params=None, json=None, data=None, headers=None, timeout=None, ok=()):
        """One exchange; returns the requests.Response of a 2xx (or of a status in ok), else
        raises AttndError. Retries (429, connections) happen below, in the session's Retry."""
        try:
            resp = self.session.request(method, self.url + path, params=params, json=json, data=data,
                                        headers=headers, timeout=timeout or self.timeout, verify=self.verify)
        except requests.Timeout as exc:
            raise AttndError(0, "timeout", "%s %s: no answer within %s s (%s)"
                             % (method, path, timeout or self.timeout, exc)) from exc
        except requests.RequestException as exc:
            raise AttndError(0, "connection_error", "%s %s%s: %s" % (method, self.url, path, exc)) from exc
        if 200 <= resp.status_code < 300 or resp.status_code in ok:
            return resp
        raise _error_from_response(resp)

    def _json(self, method, path, **kw):
        resp = self.request(method, path, **kw)
        try:
            return resp.json()
        except ValueError as exc:
            raise AttndError(resp.status_code, "bad_answer", "%s %s answered non-JSON: %r"
                             % (method, path, resp.text[:200])) from exc

    # -------------------------------------------------------------------- server ----
    def health(self):
        """GET /healthz: {"status": "ok"}."""
        return self._json("GET", "/healthz")

    def ready(self):
        """GET /readyz: True when every worker is up."""
        resp = self.request("GET", "/readyz", ok=(503,))
        try:
            return resp.json().get("ready") is True
        except ValueError:
            return False

    def device(self):
        """GET /v1/device: {"devices": [...]}."""
        return self._json("GET", "/v1/device")

    def variants(self):
        """GET /v1/variants: {"variants": [...]}."""
        return self._json("GET", "/v1/variants")

    def run_params_schema(self):
        """The run parameters' JSON schema, from GET /openapi.json (components.schemas.RunParams):
        what this server accepts, each parameter's type, bounds and enum."""
        return ((self._json("GET", "/openapi.json").get("components") or {}).get("schemas") or {}).get("RunParams")

    def models(self):
        """GET /v1/models: the model presets (a run's model=NAME), a list of dicts."""
        return self._json("GET", "/v1/models")["models"]

    def nodes(self):
        """GET /v1/nodes: {"nodes": [...], "this_node": name}: the fleet's nodes and heartbeats."""
        return self._json("GET", "/v1/nodes")

    # -------------------------------------------------------------------- runs ------
    @staticmethod
    def _params(params):
        out = {}
        for k, v in params.items():
            if v is None:
                continue
            if k == "async_":
                k = "async"
            v = _plain(v)
            if isinstance(v, int) and not isinstance(v, bool) and abs(v) > JSON_SAFE_INT:
                v = str(v)
            out[k] = v
        return out

    @classmethod
    def _query(cls, params):
        """_params for a query string: booleans as the server spells them (ragged=true)."""
        return {k: ("true" if v else "false") if isinstance(v, bool) else v for k, v in cls._params(params).items()}

    def _check_record(self, rec, status, check):
        if check and isinstance(rec, dict) and rec.get("status") in ("failed", "cancelled"):
            err = rec.get("error") if isinstance(rec.get("error"), dict) else {}
            raise AttndError(status, err.get("code") or rec["status"], err.get("message") or "the run %s"
                             % rec["status"], err.get("field"), rec, rec)
        return rec

    def run(self, check=True, timeout=None, **params):
        """POST /v1/runs with params as the JSON body; the run record once done. With
        async_=True (or async=True) the 202 answer ({"id": …}) instead: see submit/wait.
        check: raise AttndError when the run failed (else return the failed record)."""
        body = self._params(params)
        resp = self.request("POST", "/v1/runs", json=body, timeout=timeout, ok=(500,) if not check else ())
        rec = resp.json()
        if resp.status_code == 202:
            return self._accepted(resp, rec)
        return self._check_record(rec, resp.status_code, check)

    @staticmethod
    def _accepted(resp, body):
        body = dict(body) if isinstance(body, dict) else {}
        loc = resp.headers.get("Location")
        if loc:
            body.setdefault("location", loc)
        if "id" not in body and loc:
            try:
                body["id"] = int(urllib.parse.urlparse(loc).path.rstrip("/").rsplit("/", 1)[-1])
            except ValueError:
                pass
        return body

    def submit(self, **params):
        """POST /v1/runs with async=true: {"id": …, "location": …} at once (202)."""
        params.pop("async", None)
        params["async_"] = True
        resp = self.request("POST", "/v1/runs", json=self._params(params))
        return self._accepted(resp, resp.json())

    def get_run(self, run_id):
        """GET /v1/runs/ID: the stored record (a failed run's record too: it does not raise)."""
        return self._json("GET", "/v1/runs/%d" % int(run_id), ok=(500,))

    def wait(self, run_id, timeout=None, poll=0.1, check=False):
        """Poll GET /v1/runs/ID until its status is done, failed or cancelled; the record.
        timeout: seconds (None: forever) → AttndError code "timeout". check: raise on a
        failed or cancelled run."""
        deadline = None if timeout is None else time.monotonic() + timeout
        delay = poll
        while True:
            rec = self.get_run(run_id)
            if rec.get("status") in TERMINAL_STATUSES:
                return self._check_record(rec, 200, check)
            if deadline is not None and time.monotonic() >= deadline:
                raise AttndError(0, "timeout", "run %s still %s after %s s" % (run_id, rec.get("status"), timeout),
                                 body=rec, record=rec)
            time.sleep(delay)
            delay = min(delay * 1.5, 2.0)

    def cancel(self, run_id):
        """DELETE /v1/runs/ID: cancel a queued job."""
        return self._json("DELETE", "/v1/runs/%d" % int(run_id))

    def runs(self, after=None, limit=None, **filters):
        """GET /v1/runs: one page, {"runs": [...], "next_after": cursor} (order="oldest", the
        default) or {"runs": [...], "next_before": cursor, "next_after": cursor} (order="newest").
        filters: before, order, since, tag and the fields backend, status, device, node, batch,
        heads, kv_heads, seq, seq_q, seq_kv, head_dim, head_dim_v, window, page_size, num_pages,
        ragged (True or False), dtype, mask, impl, gpu, commit (docs/api.md, History); None
        leaves one out."""
        params = self._query(dict(filters, after=after, limit=limit))
        return self._json("GET", "/v1/runs", params=params)

    def runs_csv(self, after=None, limit=None, **filters):
        """GET /v1/runs?format=csv: one page as (CSV text, next cursor or None)."""
        params = self._query(dict(filters, after=after, limit=limit, format="csv"))
        resp = self.request("GET", "/v1/runs", params=params)
        nxt = resp.headers.get("Attnd-Next-Before" if filters.get("order") == "newest" else "Attnd-Next-After")
        return resp.text, (int(nxt) if nxt is not None else None)

    def aggregate(self, group_by, **filters):
        """GET /v1/runs?group_by=…: per group of runs that have a median, their count and the
        median, min and max of their medians: {"groups": [...], "group_by": [...], "more": bool}.
        group_by: field names, a list or "a,b"."""
        if not isinstance(group_by, str):
            group_by = ",".join(group_by)
        return self._json("GET", "/v1/runs", params=self._query(dict(filters, group_by=group_by)))

    def iter_runs(self, after=0, limit=100, follow=False, poll=1.0, max_runs=None, order="oldest", before=None,
                  **filters):
        """Every run the filters select, page by page (limit: the page size): oldest first from
        `after` through next_after, or newest first (order="newest") from `before` back through
        next_before. max_runs: stop after that many. follow (oldest first only): keep polling
        for new runs forever (a generator: stop iterating to stop)."""
        if order == "newest" and follow:
            raise ValueError("follow polls oldest first: order='newest' cannot follow")
        seen = 0
        cursor = before if order == "newest" else after
        while max_runs is None or seen < max_runs:
            size = limit if max_runs is None else max(1, min(limit, max_runs - seen))
            if order == "newest":
                page = self.runs(limit=size, before=cursor, order="newest", after=after or None, **filters)
            else:
                page = self.runs(after=cursor, limit=size, **filters)
            rows = page.get("runs") or []
            for row in rows:
                yield row
                seen += 1
                if max_runs is not None and seen >= max_runs:
                    return
            nxt = page.get("next_before" if order == "newest" else "next_after")
            if rows:
                if nxt is None:
                    return
                cursor = nxt
                continue
            if order == "newest":
                return
            if nxt is not None and nxt != cursor:
                cursor = nxt
                continue
            if not follow:
                return
            time.sleep(poll)

    # -------------------------------------------------------------------- studies ---
    def study(self, wait=True, timeout=None, poll_s=30, check=False, **params):
        """POST /v1/studies with params as the JSON body (docs/api.md, Studies): variants (a
        list, or "a,b"; backend or backend:impl), rounds, baseline, tags and the run
        parameters of the problem and the measurement. wait: poll until the study is final
        and return its record (timeout: seconds, None: forever → AttndError "timeout");
        else the 202 answer {"id", "status", "runs_total", "queue_position", "location"}.
        check: raise AttndError when the study did not end done."""
        resp = self.request("POST", "/v1/studies", json=self._params(params))
        accepted = self._accepted(resp, resp.json())
        if not wait:
            return accepted
        return self.wait_study(accepted["id"], timeout=timeout, poll_s=poll_s, check=check)

    def get_study(self, study_id, wait_s=None):
        """GET /v1/studies/ID: the study record; wait_s: answer once it is final or after
        that many seconds (the server's long poll, at most 600)."""
        params = {"wait": int(wait_s)} if wait_s else None
        timeout = self.timeout + wait_s if wait_s else None
        return self._json("GET", "/v1/studies/%d" % int(study_id), params=params, timeout=timeout)

    def wait_study(self, study_id, timeout=None, poll_s=30, check=False):
        """Long-poll GET /v1/studies/ID?wait= until the study is done, failed or cancelled;
        its record. timeout: seconds (None: forever) → AttndError "timeout". check: raise
        AttndError when it did not end done."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = poll_s if deadline is None else min(poll_s, max(0.0, deadline - time.monotonic()))
            rec = self.get_study(study_id, wait_s=max(1, int(left)) if left >= 1 else None)
            if rec.get("status") in TERMINAL_STATUSES:
                if check and rec.get("status") != "done":
                    err = rec.get("error") if isinstance(rec.get("error"), dict) else {}
                    raise AttndError(200, err.get("code") or rec["status"], err.get("message") or "the study %s"
                                     % rec["status"], body=rec, record=rec)
                return rec
            if deadline is not None and time.monotonic() >= deadline:
                raise AttndError(0, "timeout", "study %s still %s after %s s" % (study_id, rec.get("status"), timeout),
                                 body=rec, record=rec)

    def studies(self, limit=None, before=None, tag=None, status=None):
        """GET /v1/studies: {"studies": [...], "next_before": cursor or None}, newest first."""
        return self._json("GET", "/v1/studies", params=self._params(dict(limit=limit, before=before, tag=tag,
                                                                           status=status)))

    def cancel_study(self, study_id):
        """DELETE /v1/studies/ID: cancel a queued or running study; its record."""
        return self._json("DELETE", "/v1/studies/%d" % int(study_id))

    def compare(self, base, run, confidence=None, noise_floor=None):
        """GET /v1/compare (docs/api.md, Compare): base and run each a run id, a list of run
        ids (one configuration run several times), "study:ID" (a whole study, against another)
        or "study:ID:VARIANT"; the answer {"rows": [{"ratio", "low", "high", "significant",
        "verdict", …}], "warnings": [...], …}."""
        def side(x):
            x = _plain(x)
            return ",".join(str(_plain(i)) for i in x) if isinstance(x, (list, tuple)) else str(x)
        return self._json("GET", "/v1/compare", params=self._params(dict(base=side(base), run=side(run),
                                                                          confidence=confidence,
                                                                          noise_floor=noise_floor)))

    # -------------------------------------------------------------------- tensors ---
    def upload(self, tensor, name=None, dtype=None, device=None):
        """POST /v1/tensors?format=npy with a numpy array or torch tensor as .npy; the
        tensor's description ({"id": "t1", "name", "shape", "dtype", "bytes", "device",
        "fingerprint", …}; docs/tensors.md). bf16 torch tensors travel as uint16 bits with
        dtype=bf16 (a numpy uint16 array of bf16 bits: pass dtype="bf16"). device: cpu or
        cuda:N (default: the server's first GPU, else cpu)."""
        body, guessed = _to_npy(tensor)
        params = self._params({"format": "npy", "name": name, "device": device,
                               "dtype": dtype or (guessed if guessed == "bf16" else None)})
        return self._json("POST", "/v1/tensors", params=params, data=body,
                          headers={"Content-Type": "application/x-npy"})

    def upload_file(self, path, name=None, dtype=None, shape=None, device=None, format=None):
        """POST /v1/tensors with a file's bytes, streamed: a .npy or a safetensors file (the
        server tells them apart by content), or raw row-major bytes with dtype and shape
        (a list of ints, or "2,4,128,64"). The tensor's description, or {"tensors": [...]}
        for a safetensors file. format: npy, safetensors or raw (default: the server's guess)."""
        if isinstance(shape, (list, tuple)):
            shape = ",".join(str(int(_plain(n))) for n in shape)
        params = self._params({"name": name, "dtype": dtype, "shape": shape, "device": device, "format": format})
        with open(path, "rb") as f:
            return self._json("POST", "/v1/tensors", params=params, data=f,
                              headers={"Content-Type": "application/octet-stream"})

    def tensors(self):
        """GET /v1/tensors."""
        return self._json("GET", "/v1/tensors")

    def tensor(self, tensor_id):
        """GET /v1/tensors/ID."""
        return self._json("GET", "/v1/tensors/%s" % _tid(tensor_id))

    def download(self, tensor_id):
        """GET /v1/tensors/ID/data: the tensor as a numpy array (bf16: uint16 bits)."""
        resp = self.request("GET", "/v1/tensors/%s/data" % _tid(tensor_id))
        return np.load(io.BytesIO(resp.content), allow_pickle=False)

    def delete_tensor(self, tensor_id):
        """DELETE /v1/tensors/ID."""
        return self._json("DELETE", "/v1/tensors/%s" % _tid(tensor_id))
