"""Static checks of what ships without running it here (no Docker engine, no cluster):
the Dockerfile against the Makefile (check_dockerfile.py, and that the check catches what it
should), the Kubernetes manifests in deploy/ (parsed with PyYAML, required fields), and the
curl scripts (shell syntax)."""
import glob
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
import check_dockerfile  # noqa: E402


def test_dockerfile_passes():
    assert check_dockerfile.check(REPO) == []
    p = subprocess.run([sys.executable, os.path.join(HERE, "check_dockerfile.py"), REPO], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.fixture
def repo_copy(tmp_path):
    """The files check_dockerfile reads, copied so that a test may break them."""
    for name in ("Dockerfile", "Makefile", ".dockerignore"):
        shutil.copy(os.path.join(REPO, name), tmp_path / name)
    for d in ("common", "server", "kernels", "clients/dashboard", "deploy", "docs", "config"):
        os.makedirs(tmp_path / d, exist_ok=True)
    (tmp_path / "docs" / "openapi.json").write_text("{}")
    (tmp_path / "config" / "models.json").write_text("{}")
    shutil.copy(os.path.join(REPO, "deploy", "docker-healthcheck.sh"), tmp_path / "deploy" / "docker-healthcheck.sh")
    return tmp_path


def edit(path, old, new):
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


@pytest.mark.parametrize("name,old,new,expect", [
    ("Dockerfile", "USER attnd\n", "", "no USER"),
    ("Dockerfile", "USER attnd\n", "USER root\n", "is root"),
    ("Dockerfile", "HEALTHCHECK --interval", "# HEALTHCHECK --interval", "HEALTHCHECK"),
    ("Dockerfile", "EXPOSE 8080", "EXPOSE 9090", "EXPOSE 8080"),
    ("Dockerfile", "libcjson1 ", "", "libcjson1"),
    ("Dockerfile", "libsqlite3-dev", "", "libsqlite3-dev"),
    ("Dockerfile", "COPY --from=build /out/lib/ /opt/attnd/bin/lib/\n", "", "libcupti"),
    ("Dockerfile", "-cudnn-runtime-ubuntu24.04", "-cudnn-devel-ubuntu24.04", "runtime image"),
    ("Dockerfile", "13.0.2-cudnn-runtime", "13.0.1-cudnn-runtime", "different CUDA versions"),
    ("Dockerfile", "FROM nvidia/cuda:13.0.2-cudnn-devel-ubuntu24.04 AS build", "FROM nvidia/cuda:latest AS build",
     "not pinned"),
    ("Dockerfile", "COPY Makefile ./", "ADD https://example.com/x.tgz /src/", "URL"),
    ("Dockerfile", "VOLUME [\"/var/lib/attnd\"]", "", "VOLUME"),
    ("Dockerfile", "ATTND_LISTEN=0.0.0.0:8080", "ATTND_LISTEN=127.0.0.1:8080", "ATTND_LISTEN"),
    ("Dockerfile", "COPY clients/dashboard/ /opt/attnd/clients/dashboard/\n", "", "dashboard"),
    ("Makefile", "-lsqlite3", "-lsqlite3 -lzstd", "-lzstd"),
    (".dockerignore", "data\n", "data\nserver\n", "dockerignore"),
    ("Dockerfile", "/out/attnd /out/attnd-worker /opt/attnd/bin/", "/out/attnd /opt/attnd/bin/", "attnd-worker"),
    (".dockerignore", "!docs/openapi.json\n", "", "dockerignore"),
    ("Dockerfile", "COPY docs/openapi.json /opt/attnd/docs/openapi.json\n", "", "openapi"),
])
def test_dockerfile_check_catches(repo_copy, name, old, new, expect):
    edit(repo_copy / name, old, new)
    problems = check_dockerfile.check(str(repo_copy))
    assert any(expect in p for p in problems), problems


def docs(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def all_manifests():
    out = []
    for path in sorted(glob.glob(os.path.join(REPO, "deploy", "*.yaml"))):
        out += [(os.path.basename(path), d) for d in docs(path)]
    return out


def pod_spec(obj):
    return obj["spec"]["template"]["spec"]


def test_manifests_parse_and_have_kinds():
    kinds = [d["kind"] for _, d in all_manifests()]
    for need in ("Deployment", "Service", "PersistentVolumeClaim", "Job"):
        assert need in kinds, kinds
    for name, d in all_manifests():
        assert d.get("apiVersion") and d.get("kind") and d["metadata"].get("name"), (name, d)


def test_workloads_one_gpu_probes_volume_nonroot():
    found = 0
    for name, d in all_manifests():
        if d["kind"] not in ("Deployment", "StatefulSet"):
            continue
        found += 1
        spec = d["spec"]
        assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
        ps = pod_spec(d)
        assert ps["securityContext"]["runAsNonRoot"] is True
        assert ps["terminationGracePeriodSeconds"] >= 300  # SIGTERM finishes the running job
        (c,) = ps["containers"]
        assert str(c["resources"]["limits"]["nvidia.com/gpu"]) == "1", name
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        env = {e["name"]: e.get("value") for e in c["env"]}
        assert env["ATTND_LISTEN"] == "0.0.0.0:8080"
        mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
        assert mounts["data"] == env["ATTND_DATA_DIR"]
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert ports["http"] == 8080
        for probe in ("readinessProbe", "livenessProbe"):
            assert c[probe]["httpGet"]["port"] in ("http", 8080)
        vols = {v["name"] for v in ps.get("volumes", [])}
        vct = {v["metadata"]["name"] for v in spec.get("volumeClaimTemplates", [])}
        assert "data" in vols | vct
        if d["kind"] == "Deployment":
            assert spec["strategy"]["type"] == "Recreate"  # one SQLite writer per volume
            claim = next(v for v in ps["volumes"] if v["name"] == "data")["persistentVolumeClaim"]["claimName"]
            assert any(x["kind"] == "PersistentVolumeClaim" and x["metadata"]["name"] == claim
                       for _, x in all_manifests())
    assert found >= 1


def test_service_selects_the_pods():
    ms = all_manifests()
    pods = [d["spec"]["template"]["metadata"]["labels"] for _, d in ms if d["kind"] in ("Deployment", "StatefulSet")]
    for _, svc in ms:
        if svc["kind"] != "Service":
            continue
        assert any(svc["spec"]["selector"].items() <= labels.items() for labels in pods), svc
        assert any(p.get("targetPort") == "http" or p.get("targetPort") == 8080 for p in svc["spec"]["ports"])


def test_sweep_job_runs_attnd_batch_on_a_plan_from_a_configmap():
    ms = all_manifests()
    (job,) = [d for _, d in ms if d["kind"] == "Job"]
    ps = pod_spec(job)
    assert ps["restartPolicy"] == "Never"
    assert ps["securityContext"]["runAsNonRoot"] is True
    (c,) = ps["containers"]
    argv = c.get("command", []) + c.get("args", [])  # no command: the image's entrypoint, attnd
    assert argv[:2] == ["batch", "/plans/plan.json"], argv
    assert argv[argv.index("--out") + 1] == "/results/results.jsonl"
    assert str(c["resources"]["limits"]["nvidia.com/gpu"]) == "1"
    mounts = {m["mountPath"]: m["name"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in ps["volumes"]}
    assert "/results" in mounts and mounts["/results"] in volumes
    plans = volumes[mounts["/plans"]]["configMap"]["name"]
    (cm,) = [d for _, d in ms if d["kind"] == "ConfigMap" and d["metadata"]["name"] == plans]
    # exit 1 and 2 are not worth a retry (failed runs, a bad plan)
    rules = job["spec"]["podFailurePolicy"]["rules"]
    assert any(r["action"] == "FailJob" and {1, 2} <= set(r["onExitCodes"]["values"]) for r in rules)
    # the plan is one attnd batch (and attnd-cli sweep --plan) accepts
    sys.path.insert(0, os.path.join(REPO, "clients", "python"))
    from attnd import cli
    grid = cli.plan_grid(json.loads(cm["data"]["plan.json"]))
    assert len(grid) >= 1 and all(p["backend"] for p in grid)


def test_curl_scripts_parse():
    scripts = sorted(glob.glob(os.path.join(REPO, "clients", "curl", "*.sh")))
    assert len(scripts) >= 6, scripts
    for s in scripts:
        assert os.access(s, os.X_OK) or s.endswith("common.sh"), s
        p = subprocess.run(["sh", "-n", s], capture_output=True, text=True, timeout=30)
        assert p.returncode == 0, (s, p.stderr)
        assert "ATTND_URL" in open(s).read(), s


def test_operations_doc_lists_every_setting():
    """docs/operations.md's configuration table is the one `attnd --help` gives."""
    binary = os.environ.get("ATTND_BIN")
    if not binary or not os.path.exists(binary):
        pytest.skip("ATTND_BIN not set (make test-api sets it)")
    import settings_doc
    rows = settings_doc.parse(settings_doc.help_text(binary))
    assert len(rows) >= 15
    doc = open(os.path.join(REPO, "docs", "operations.md")).read()
    missing = [r["key"] for r in rows if "| `%s` | `%s` |" % (r["key"], r["env"]) not in doc]
    assert not missing, ("docs/operations.md lacks settings %s; run: python3 tests/docker/settings_doc.py "
                         "%s --write" % (missing, binary))
