#!/usr/bin/env python3
"""Static checks of the Dockerfile against what the binary needs (no Docker engine runs in
CI). Exit 0 when every check passes, else 1 with one line per problem.

  python3 tests/docker/check_dockerfile.py [REPO]

What it checks:
- two stages or more; every FROM pinned to a versioned tag (no :latest, no untagged image);
  the build stage on nvidia/cuda:13.*-cudnn-devel-ubuntu24.04, the final stage on the
  runtime image of the same CUDA version;
- every -l library of the Makefile's LDLIBS_* (front and worker) is provided in the final stage: by its Ubuntu
  24.04 runtime package (apt-get install), by a .so copied from the build stage, by the
  base image (cuBLAS), or it is static / part of libc. A library the table below does not
  know fails the check: a new dependency must be added here and to the Dockerfile;
- the build stage installs the -dev packages those libraries are built against;
- the binary and the files it reads beside itself (BUNDLED) are copied in;
  every COPY source exists in the repository and is not excluded by .dockerignore;
- USER is set and is not root; HEALTHCHECK exists, hits /healthz, and the tool it runs
  is in the image; EXPOSE 8080; a VOLUME for the data dir; ATTND_LISTEN=0.0.0.0:8080 and
  ATTND_DATA_DIR set to the volume;
- no ADD of a URL (downloads go through a checked package manager).
hadolint runs too when it is installed (it is not a Debian bookworm package; optional).
"""
import fnmatch
import os
import re
import shlex
import shutil
import subprocess
import sys

# -l name → how the final stage gets it: ("apt", runtime package, build package),
# ("copy", soname, build package), ("base", why), ("static", why).
LIBRARIES = {
    "cudart_static": ("static", "linked statically"),
    "cublas": ("base", "the CUDA runtime image carries libcublas"),
    "cupti": ("copy", "libcupti.so.13", None),
    "microhttpd": ("apt", "libmicrohttpd12t64", "libmicrohttpd-dev"),
    "cjson": ("apt", "libcjson1", "libcjson-dev"),
    "sqlite3": ("apt", "libsqlite3-0", "libsqlite3-dev"),
    "pq": ("apt", "libpq5", "libpq-dev"),
    "dl": ("static", "part of glibc"),
    "rt": ("static", "part of glibc"),
    "m": ("static", "part of glibc"),
    "pthread": ("static", "part of glibc"),
}

# Files the binary reads at run time from beside itself (server/front/install_path.c: <exe>/../REL).
BUNDLED = (("clients/dashboard", "the dashboard, GET /"), ("docs/openapi.json", "GET /openapi.json"),
           ("config/models.json", "the model presets, model=NAME and GET /v1/models"))

CUDA_RE = re.compile(r"^nvidia/cuda:(\d+\.\d+\.\d+)-cudnn-(devel|runtime)-ubuntu(\d+\.\d+)$")


def logical_lines(text):
    """Dockerfile instructions: continuations joined, comments and blanks dropped."""
    out, cur = [], ""
    for line in text.splitlines():
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if s.startswith("#"):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        out.append(cur.strip())
        cur = ""
    if cur.strip():
        out.append(cur.strip())
    return out


def stages(lines):
    """[(from_line_args, [(INSTR, args)])]"""
    result = []
    for line in lines:
        instr, _, args = line.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            result.append((args.strip(), []))
        elif result:
            result[-1][1].append((instr, args.strip()))
    return result


def makefile_libs(makefile):
    text = open(makefile).read().replace("\\\n", " ")
    lines = re.findall(r"^LDLIBS\w*\s*[:?]?=\s*(.*)$", text, re.M)  # LDLIBS_FRONT, LDLIBS_WORKER, …
    if not lines:
        return None
    return sorted({lib for line in lines for lib in re.findall(r"-l(\S+)", line)})


def dockerignored(repo, path):
    """Is path excluded from the build context? .dockerignore patterns in order, the last
    match wins, "!" re-includes; a pattern matches the path or any of its parent dirs."""
    ign = os.path.join(repo, ".dockerignore")
    if not os.path.exists(ign):
        return False
    pats = [l.strip() for l in open(ign) if l.strip() and not l.startswith("#")]
    parts = path.strip("/").split("/")
    ignored = False
    for pat in pats:
        neg = pat.startswith("!")
        pat = pat.lstrip("!").rstrip("/")
        hit = False
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            if fnmatch.fnmatch(prefix, pat) or (pat.startswith("**/") and fnmatch.fnmatch(parts[i - 1], pat[3:])):
                hit = True
        if hit:
            ignored = not neg
    return ignored


def check(repo):
    problems = []
    path = os.path.join(repo, "Dockerfile")
    if not os.path.exists(path):
        return ["no Dockerfile at %s" % path]
    lines = logical_lines(open(path).read())
    st = stages(lines)
    if len(st) < 2:
        problems.append("expected a multi-stage build (found %d FROM)" % len(st))
        return problems

    names, versions = {}, []
    for i, (frm, _) in enumerate(st):
        toks = frm.split()
        image = toks[0]
        if len(toks) >= 3 and toks[1].upper() == "AS":
            names[toks[2]] = i
        if ":" not in image or image.endswith(":latest") or "$" in image:
            problems.append("FROM %s is not pinned to a versioned tag" % image)
        m = CUDA_RE.match(image)
        if not m:
            problems.append("FROM %s: expected nvidia/cuda:13.x.y-cudnn-{devel,runtime}-ubuntu24.04" % image)
            continue
        ver, kind, ubuntu = m.groups()
        versions.append(ver)
        if not ver.startswith("13."):
            problems.append("FROM %s: CUDA 13 expected" % image)
        if ubuntu != "24.04":
            problems.append("FROM %s: the package names checked here are Ubuntu 24.04's" % image)
        if i == 0 and kind != "devel":
            problems.append("the build stage must be the devel image (nvcc, headers)")
        if i == len(st) - 1 and kind != "runtime":
            problems.append("the final stage must be the runtime image, not %s" % kind)
    if len(set(versions)) > 1:
        problems.append("the stages use different CUDA versions: %s" % ", ".join(versions))

    build_instrs = [x for s in st[:-1] for x in s[1]]
    final = st[-1][1]

    def installed(instrs):
        pk = set()
        for instr, args in instrs:
            if instr != "RUN":
                continue
            for seg in re.split(r"&&|;|\|\|", args):
                toks = seg.split()
                if "apt-get" in toks and "install" in toks:
                    pk.update(t for t in toks[toks.index("install") + 1:] if not t.startswith("-"))
        return pk

    build_pk, final_pk = installed(build_instrs), installed(final)
    copies = [args for instr, args in final if instr == "COPY"]
    copied_text = " ".join(copies)
    build_text = " ".join(a for i, a in build_instrs if i == "RUN")

    libs = makefile_libs(os.path.join(repo, "Makefile"))
    if not libs:
        problems.append("no LDLIBS with -l libraries found in the Makefile")
        libs = []
    for lib in libs:
        how = LIBRARIES.get(lib)
        if how is None:
            problems.append("Makefile links -l%s, which this check does not know: add it to LIBRARIES in %s and "
                            "its runtime package to the Dockerfile's final stage" % (lib, __file__))
            continue
        if how[0] == "apt":
            if how[1] not in final_pk:
                problems.append("-l%s: the final stage does not apt-get install %s" % (lib, how[1]))
            if how[2] not in build_pk:
                problems.append("-l%s: the build stage does not apt-get install %s" % (lib, how[2]))
        elif how[0] == "copy":
            in_build = how[1] in build_text or how[1] in copied_text
            copied_lib = any("--from=" in c and ("lib" in c.split()[-1]) for c in copies)
            if not (in_build and copied_lib) and "cuda-cupti" not in " ".join(final_pk):
                problems.append("-l%s: %s is neither copied from the build stage into the final one nor installed"
                                % (lib, how[1]))

    # the binary and what it reads beside itself
    for exe in ("attnd", "attnd-worker"):
        if not any("--from=" in c and any(t.endswith("/" + exe) for t in c.split()[1:-1]) for c in copies):
            problems.append("the final stage does not COPY --from=<build> the %s binary" % exe)
    for rel, what in BUNDLED:
        if os.path.exists(os.path.join(repo, rel)) and rel not in copied_text:
            problems.append("%s (%s) is not copied into the image" % (rel, what))
    for instr, args in [x for s in st for x in s[1]]:
        if instr not in ("COPY", "ADD"):
            continue
        toks = [t for t in shlex.split(args) if not t.startswith("--")]
        if any("--from=" in t for t in args.split()):
            continue
        for src in toks[:-1]:
            if instr == "ADD" and re.match(r"^[a-z]+://", src):
                problems.append("ADD %s: no downloads through ADD" % src)
                continue
            if not os.path.exists(os.path.join(repo, src)):
                problems.append("%s %s: no such path in the repository" % (instr, src))
            elif dockerignored(repo, src):
                problems.append("%s %s: excluded by .dockerignore" % (instr, src))
    for instr, args in [x for s in st for x in s[1]]:
        if instr == "ADD" and re.search(r"\b[a-z]+://", args):
            problems.append("ADD of a URL: %s" % args)

    users = [a for i, a in final if i == "USER"]
    if not users:
        problems.append("the final stage has no USER: it would run as root")
    elif users[-1].split(":")[0] in ("root", "0"):
        problems.append("USER %s is root" % users[-1])
    hc = [a for i, a in final if i == "HEALTHCHECK"]
    if not hc or hc[-1].upper().startswith("NONE"):
        problems.append("no HEALTHCHECK in the final stage")
    else:
        cmd = hc[-1]
        tool_ok = False
        if "/healthz" in cmd:
            tool_ok = ("curl" in cmd and "curl" in final_pk) or ("wget" in cmd and "wget" in final_pk)
        else:
            # a script: it must be copied in, hit /healthz, and its tool must be installed
            for c in copies:
                toks = c.split()
                if toks and toks[-1] in cmd and not any(t.startswith("--from=") for t in toks):
                    script = os.path.join(repo, toks[-2])
                    if os.path.exists(script):
                        body = open(script).read()
                        tool_ok = "/healthz" in body and (("curl" in body and "curl" in final_pk) or
                                                          ("wget" in body and "wget" in final_pk))
        if not tool_ok:
            problems.append("HEALTHCHECK must GET /healthz with a tool installed in the image (curl or wget)")
    if not any(i == "EXPOSE" and "8080" in a.split() for i, a in final):
        problems.append("no EXPOSE 8080")
    vols = " ".join(a for i, a in final if i == "VOLUME")
    envs = " ".join(a for i, a in final if i == "ENV")
    if "ATTND_LISTEN=0.0.0.0:8080" not in envs:
        problems.append("ENV ATTND_LISTEN=0.0.0.0:8080 missing (the default listens on 127.0.0.1 only)")
    m = re.search(r"ATTND_DATA_DIR=(\S+)", envs)
    if not m:
        problems.append("ENV ATTND_DATA_DIR missing")
    elif m.group(1) not in vols:
        problems.append("ATTND_DATA_DIR %s is not a VOLUME (%s)" % (m.group(1), vols or "none"))
    if not any(i == "ENTRYPOINT" and "attnd" in a for i, a in final) and not any(
            i == "CMD" and "attnd" in a for i, a in final):
        problems.append("no ENTRYPOINT/CMD running attnd")
    return problems


def hadolint(repo):
    exe = shutil.which("hadolint")
    if not exe:
        return []
    p = subprocess.run([exe, "--failure-threshold", "error", os.path.join(repo, "Dockerfile")],
                       capture_output=True, text=True, timeout=60)
    return [] if p.returncode == 0 else ["hadolint: " + l for l in p.stdout.splitlines()]


def main(argv):
    repo = argv[1] if len(argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    problems = check(repo) + hadolint(repo)
    for p in problems:
        print("Dockerfile: " + p)
    if not problems:
        print("Dockerfile: ok (%s)" % ("hadolint and static checks" if shutil.which("hadolint") else "static checks"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
