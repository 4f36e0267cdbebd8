"""Every number explains itself (on the cpu device): what built the server (--version, the
"build" object of /v1/device and of every record), no asked-for parameter silently dropped,
seeds that JSON cannot carry refused, and the same perf/energy schema as a GPU run with the
reason each number is unknown."""
import re
import subprocess

from attnd_api_helpers import attnd_bin, error_of, tiny

BUILD_KEYS = {"version", "commit", "dirty", "compiler", "nvcc", "cuda_toolkit", "gencode", "built"}


def test_version_names_the_build():
    p = subprocess.run([attnd_bin(), "--version"], capture_output=True, text=True, timeout=10)
    assert p.returncode == 0, p.stderr
    m = re.match(r"^attnd (\d+\.\d+\.\d+) \(commit ([0-9a-f]{12}|unknown)(, dirty)?\) built \S+Z with gcc \S+, "
                 r"nvcc [\d.]+, CUDA [\d.]+, for (sm_\d+a? ?|compute_\d+ ?)+$", p.stdout.strip())
    assert m, p.stdout


def test_device_and_records_carry_the_build(api):
    build = api.get("/v1/device").json()["build"]
    assert set(build) == BUILD_KEYS, build
    assert isinstance(build["dirty"], bool) and re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", build["built"])
    assert build["gencode"] and all(re.match(r"^(sm|compute)_\d+a?$", a) for a in build["gencode"].split())
    rec = api.run_ok(**tiny())
    assert rec["build"] == build
    assert api.get("/v1/runs/%d" % rec["id"]).json()["build"] == build  # stored with it


def test_parameters_that_do_not_apply_are_refused(api):
    for name, value in (("graph", "true"), ("cache", "cold")):
        r = api.run(params=tiny(**{name: value}))
        assert r.status_code == 422, r.text
        e = error_of(r)
        assert e["code"] == "not_applicable" and e["field"] == name and "cpu" in e["message"], e
    rec = api.run_ok(**tiny(graph="false", cache="hot"))  # what the cpu device does: accepted
    assert rec["timing"]["graph"] is False and rec["timing"]["cache"] == "hot"


def test_seeds_json_numbers_cannot_carry_are_refused(api):
    body = dict(tiny(), seed=9007199254740993)  # arrives as 2^53 in any double-based parser
    r = api.run(body=body)
    assert r.status_code == 400, r.text
    e = error_of(r)
    assert e["field"] == "seed" and "decimal string" in e["message"], e
    r = api.run(body=dict(tiny(), seed=2 ** 53))
    assert r.status_code == 400, r.text
    rec = api.run(body=dict(tiny(), seed="9007199254740993")).json()
    assert rec["params"]["seed"] == "9007199254740993"
    assert api.run(body=dict(tiny(), seed=2 ** 53 - 1)).status_code == 200


def test_cpu_record_says_why_peaks_and_energy_are_unknown(api):
    rec = api.run_ok(**tiny())
    perf, energy = rec["perf"], rec["energy"]
    assert perf["tflops"] > 0
    assert perf["peak_tflops"] is None and "cpu" in perf["peak_tflops_basis"]
    assert perf["fraction_of_peak"] == {"compute": None, "bandwidth": None} and perf["suspect"] is False
    assert energy["joules_per_forward"] is None and energy["why"] == "the cpu device has no energy counter"
