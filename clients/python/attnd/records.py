"""Run records as flat rows: what a table, a CSV or a pandas DataFrame holds.

    flatten_record(rec)  one record -> a dict of RECORD_COLUMNS (no pandas needed)
    to_dataframe(obj)    records, a runs page, a sweep's results -> pandas.DataFrame
    verify_passed(rec)   True, False, or None when the run did not verify
    noise_missed(rec)    True when the run's timing ended noisier than its target_noise

The columns are those of GET /v1/runs?format=csv (docs/api.md, CSV export), in its order,
then what the CSV leaves out: target_noise and noise_missed. A DataFrame made here and one
read from the server's CSV line up column by column.
"""

# The server's CSV columns (docs/api.md, CSV export): (column, path in the record).
CSV_COLUMNS = (
    ("id", ("id",)), ("status", ("status",)), ("created", ("created",)), ("finished", ("finished",)),
    ("node", ("node",)), ("backend", ("backend",)), ("device", ("params", "device")), ("gpu", ("device", "name")),
    ("batch", ("params", "batch")), ("heads", ("params", "heads")), ("kv_heads", ("params", "kv_heads")),
    ("seq_q", ("params", "seq_q")), ("seq_kv", ("params", "seq_kv")), ("head_dim", ("params", "head_dim")),
    ("head_dim_v", ("params", "head_dim_v")), ("window", ("params", "window")),
    ("page_size", ("params", "page_size")), ("num_pages", ("params", "num_pages")), ("ragged", None),
    ("dtype", ("params", "dtype")),
    ("mask", ("params", "mask")), ("impl", ("params", "impl")), ("impl_used", ("impl_used",)),
    ("cache", ("params", "cache")), ("graph", ("params", "graph")),
    ("median_us", ("timing", "median_us")), ("mean_us", ("timing", "mean_us")), ("min_us", ("timing", "min_us")),
    ("max_us", ("timing", "max_us")), ("p10_us", ("timing", "p10_us")), ("p90_us", ("timing", "p90_us")),
    ("stdev_us", ("timing", "stdev_us")), ("rse", ("timing", "rse")), ("iters", ("timing", "iters")),
    ("stop_reason", ("timing", "stop_reason")), ("tflops", ("perf", "tflops")), ("gbps", ("perf", "gbps")),
    ("verify_pass", ("verify", "pass")), ("verify_rel_l2_err", ("verify", "rel_l2_err")),
    ("verify_max_abs_err", ("verify", "max_abs_err")),
    ("sm_min_mhz", ("timing", "clocks", "sm_min_mhz")), ("sm_max_mhz", ("timing", "clocks", "sm_max_mhz")),
    ("sm_limit_mhz", ("timing", "clocks", "sm_limit_mhz")), ("throttled", ("timing", "clocks", "throttled")),
    ("commit", ("build", "commit")), ("dirty", ("build", "dirty")), ("tags", ("params", "tags")),
    ("error", ("error", "code")),
)
EXTRA_COLUMNS = ("target_noise", "noise_missed")
RECORD_COLUMNS = tuple(name for name, _ in CSV_COLUMNS) + EXTRA_COLUMNS
# The columns that hold numbers: a DataFrame holds them as numbers, a missing one as NaN (as
# pandas reads the server's CSV), not as None.
NUMERIC_COLUMNS = ("id", "batch", "heads", "kv_heads", "seq_q", "seq_kv", "head_dim", "head_dim_v", "window",
                   "page_size", "num_pages",
                   "median_us", "mean_us", "min_us", "max_us", "p10_us", "p90_us", "stdev_us", "rse", "iters",
                   "tflops", "gbps", "verify_rel_l2_err", "verify_max_abs_err", "sm_min_mhz", "sm_max_mhz",
                   "sm_limit_mhz", "target_noise")


def _at(rec, path):
    for key in path:
        if not isinstance(rec, dict):
            return None
        rec = rec.get(key)
    return rec


def verify_passed(rec):
    """verify.pass of a record: True, False, or None (the run did not verify, or has no record)."""
    v = _at(rec, ("verify", "pass"))
    return v if isinstance(v, bool) else None


def noise_missed(rec):
    """True when the run's stopping rule missed its noise target: its timing.rse ended above
    params.target_noise (it stopped on max_time or max_iters instead, or ran a fixed iters that
    could not reach it). False when it is within, None when there is no rse (one sample, no
    timing)."""
    rse, target = _at(rec, ("timing", "rse")), _at(rec, ("params", "target_noise"))
    if not isinstance(rse, (int, float)) or not isinstance(target, (int, float)):
        return None
    return rse > target


def flatten_record(rec):
    """One run record as a flat dict of RECORD_COLUMNS (values as in the JSON; tags joined by
    spaces, as in the server's CSV; a missing field is None)."""
    row = {name: _at(rec, path) if path else None for name, path in CSV_COLUMNS}
    p = (rec or {}).get("params") or {}
    if rec and isinstance(rec.get("params"), dict):  # the server's: 0 for a contiguous cache; lengths given
        row["page_size"] = p.get("page_size", 0) if row["page_size"] is None else row["page_size"]
        row["ragged"] = p.get("seqlens_q") is not None or p.get("seqlens_kv") is not None
    if row["kv_heads"] is None:
        row["kv_heads"] = p.get("heads")
    if row["head_dim_v"] is None:
        row["head_dim_v"] = p.get("head_dim")
    if isinstance(row["tags"], list):
        row["tags"] = " ".join(row["tags"]) if row["tags"] else None
    row["target_noise"] = p.get("target_noise")
    row["noise_missed"] = noise_missed(rec)
    return row


def _records(obj):
    """The records in obj: a record, a list (or any iterable) of them, a GET /v1/runs page
    ({"runs": [...]}) or attnd-cli sweep's results ({"params", "record"} or {"params", "error"})."""
    if isinstance(obj, dict):
        obj = obj["runs"] if isinstance(obj.get("runs"), list) else [obj]
    for item in obj:
        if isinstance(item, dict) and "params" in item and ("record" in item or "error" in item) \
                and "id" not in item:
            if item.get("record") is not None:
                yield item["record"]
            else:  # refused before it ran: its parameters and the refusal's code
                p = dict(item.get("params") or {})
                for axis in ("seq_q", "seq_kv"):
                    p.setdefault(axis, p.get("seq"))
                yield {"backend": p.get("backend"), "status": "refused", "params": p,
                       "error": {"code": (item.get("error") or {}).get("code")}}
        else:
            yield item


def to_dataframe(obj):
    """A pandas DataFrame of run records, one row each, columns RECORD_COLUMNS (see
    flatten_record); created and finished as UTC datetimes, a missing number as NaN. obj: records (a list or
    Client.iter_runs(...)), a GET /v1/runs page, or attnd-cli sweep --json's results.
    Needs pandas (an optional dependency: pip install pandas)."""
    try:
        import pandas as pd
    except ImportError as exc:
        raise ImportError("attnd.to_dataframe needs pandas (pip install pandas); attnd.flatten_record "
                          "gives the same rows as dicts without it") from exc
    df = pd.DataFrame([flatten_record(r) for r in _records(obj)], columns=list(RECORD_COLUMNS))
    for col in ("created", "finished"):
        df[col] = pd.to_datetime(df[col], utc=True, errors="coerce")
    for col in NUMERIC_COLUMNS:
        df[col] = pd.to_numeric(df[col], errors="coerce")
    return df
