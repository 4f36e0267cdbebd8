#!/usr/bin/env python3
"""FlashInfer's headers for `make flashinfer`, from the flashinfer-python wheel on PyPI.

  python3 scripts/fetch-flashinfer.py VERSION DIR

Downloads flashinfer_python-VERSION-py3-none-any.whl into DIR with `pip download --no-deps`
(once: a wheel already there is reused), unpacks what attnd's module compiles against into
DIR/wheel/ (FlashInfer's include/, the CUTLASS and CCCL it ships, flashinfer/_build_meta.py),
checks that the wheel is the version asked for, and writes DIR/version: "VERSION COMMIT".
Nothing of FlashInfer is copied into the source tree. Exit 0, or 1 with the reason.
"""
import os
import re
import shutil
import subprocess
import sys
import zipfile

# The parts of the wheel the module's files include (kernels/flashinfer/README.md).
PARTS = (
    "flashinfer/data/include/",
    "flashinfer/data/cutlass/include/",
    "flashinfer/data/cutlass/tools/util/include/",
    "flashinfer/data/cccl/",
    "flashinfer/_build_meta.py",
)


def fail(text):
    print("fetch-flashinfer: " + text, file=sys.stderr)
    return 1


def main(argv):
    if len(argv) != 3:
        return fail("usage: fetch-flashinfer.py VERSION DIR")
    version, out = argv[1], argv[2]
    wheel = os.path.join(out, "flashinfer_python-%s-py3-none-any.whl" % version)
    os.makedirs(out, exist_ok=True)
    if not os.path.exists(wheel):
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
               "flashinfer-python==" + version, "-d", out]
        print("  PIP   flashinfer-python==%s" % version)
        if subprocess.run(cmd).returncode != 0 or not os.path.exists(wheel):
            return fail("pip download of flashinfer-python==%s failed (no network, or no pip: "
                        "apt-get install python3-pip)" % version)
    unpacked = os.path.join(out, "wheel")
    shutil.rmtree(unpacked, ignore_errors=True)
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.startswith(PARTS)]
        if not any(n.startswith(PARTS[0]) for n in names):
            return fail("%s has no %s" % (wheel, PARTS[0]))
        z.extractall(unpacked, names)
    meta = open(os.path.join(unpacked, "flashinfer", "_build_meta.py")).read()
    found = re.search(r'^__version__\s*=\s*"([^"]+)"', meta, re.M)
    commit = re.search(r'^__git_(?:commit|version)__\s*=\s*"([0-9a-f]+)', meta, re.M)
    if not found or found.group(1) != version:
        return fail("%s says version %s, not %s" % (wheel, found.group(1) if found else "?", version))
    with open(os.path.join(out, "version"), "w") as f:
        f.write("%s %s\n" % (version, commit.group(1)[:12] if commit else "unknown"))
    print("  WHEEL flashinfer-python %s: %d files unpacked into %s" % (version, len(names), unpacked))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
