#!/usr/bin/env python3
"""The folders' rules (docs/architecture.md), checked over the sources and the build:

- common/ includes only common/; front/ only common/ and front/; worker/ common/, worker/
  and kernels/; kernels/ only kernels/ and common/ (the CUDA-free problem description).
- no two files include each other, directly or through others (no include loop);
- no CUDA header reaches an object of the front: the .d files of common/ and front/ objects
  name no file of the CUDA toolkit, cuDNN, cuBLAS, CUPTI or NVML;
- `ldd attnd` (the front) lists no CUDA library; attnd-worker does link the CUDA runtime's
  companions (cuBLAS, CUPTI) — the split is real, not a copy.
- no source file in front/ or worker/ is over MAX_LINES lines.

Exit 0 when every rule holds, else 1 with every breach listed.
"""
import argparse
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDERS = ("common", "front", "worker", "kernels")
ALLOWED = {
    "common": {"common"},
    "front": {"common", "front"},
    "worker": {"common", "worker", "kernels"},
    "kernels": {"common", "kernels"},
}
SOURCE = re.compile(r"\.(c|h|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
CUDA_FILE = re.compile(r"(/cuda[^/]*/|cudnn|cublas|cupti|nvml|cuda_runtime|nvToolsExt|/targets/x86_64-linux/)")
CUDA_LIB = re.compile(r"lib(cuda|cudart|cublas|cublasLt|cupti|cudnn|nvidia-ml|nvrtc)\b")
MAX_LINES = 700


def sources():
    for folder in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(ROOT, folder)):
            for n in names:
                if SOURCE.search(n):
                    yield os.path.relpath(os.path.join(dirpath, n), ROOT)


def includes(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return INCLUDE.findall(f.read())


def check_folders(files, graph, problems):
    for f in files:
        top = f.split("/")[0]
        for inc in graph[f]:
            if inc == "build_info_values.h":  # generated into $(BUILD) by the Makefile
                continue
            if "/" not in inc:
                problems.append(f"{f}: includes \"{inc}\": name project headers from the root (folder/file.h)")
                continue
            if inc.split("/")[0] not in ALLOWED[top]:
                problems.append(f"{f}: includes {inc}, but {top}/ may include only {sorted(ALLOWED[top])}")
            elif not os.path.exists(os.path.join(ROOT, inc)):
                problems.append(f"{f}: includes {inc}, which does not exist")


def check_loops(files, graph, problems):
    # A .c/.cu file including a header of its own name is normal; a loop is a header cycle or
    # two .c files that include each other's header while each header is included back.
    state, stack = {}, []

    def visit(node):
        state[node] = 1
        stack.append(node)
        for nxt in graph.get(node, ()):
            if nxt not in graph:
                continue
            if state.get(nxt) == 1:
                cyc = stack[stack.index(nxt):] + [nxt]
                problems.append("include loop: " + " -> ".join(cyc))
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for f in sorted(files):
        if f not in state:
            visit(f)
    # module loops: a.c includes b.h and b.c includes a.h
    mod = {}
    for f in files:
        if f.endswith((".c", ".cu")):
            base = os.path.splitext(f)[0]
            used = [i for i in graph[f] if i.endswith(".h")]
            own = base + ".h"
            used += graph.get(own, [])  # what its own header pulls in is used too
            mod[base] = {os.path.splitext(i)[0] for i in used if i.endswith(".h")} - {base}
    seen = set()
    for a, deps in mod.items():
        for b in deps:
            if a in mod.get(b, ()) and (b, a) not in seen:
                seen.add((a, b))
                problems.append(f"modules include each other: {a}.c uses {b}.h and {b}.c uses {a}.h")


def check_front_objects(build, problems):
    checked = 0
    for folder in ("common", "front"):
        for dirpath, _, names in os.walk(os.path.join(build, folder)):
            for n in names:
                if not n.endswith(".d"):
                    continue
                checked += 1
                with open(os.path.join(dirpath, n), encoding="utf-8") as f:
                    for dep in f.read().replace("\\\n", " ").split():
                        if CUDA_FILE.search(dep):
                            problems.append(f"{os.path.join(dirpath, n)}: a front object depends on {dep}")
                            break
    if checked == 0:
        problems.append(f"no .d files of common/ or front/ objects under {build}: build first")


def check_binaries(build, problems):
    front, worker = os.path.join(build, "attnd"), os.path.join(build, "attnd-worker")
    for exe in (front, worker):
        if not os.access(exe, os.X_OK):
            problems.append(f"{exe} is not built")
            return
    out = subprocess.run(["ldd", front], capture_output=True, text=True).stdout
    for line in out.splitlines():
        if CUDA_LIB.search(line):
            problems.append(f"ldd {front}: the front links {line.strip()}")
    nm = subprocess.run(["nm", "-D", "--undefined-only", front], capture_output=True, text=True).stdout
    for sym in ("cudaGetDeviceCount", "cublasCreate_v2", "cuptiActivityEnable", "dlopen"):
        if re.search(r"\b" + sym + r"\b", nm):
            problems.append(f"the front imports {sym}")
    wout = subprocess.run(["ldd", worker], capture_output=True, text=True).stdout
    if "libcublas" not in wout or "libcupti" not in wout:
        problems.append(f"ldd {worker}: expected cuBLAS and CUPTI in the worker, got:\n{wout}")


def check_sizes(files, problems):
    for f in files:
        if f.split("/")[0] not in ("front", "worker"):
            continue
        with open(os.path.join(ROOT, f), encoding="utf-8") as fh:
            n = sum(1 for _ in fh)
        if n > MAX_LINES:
            problems.append(f"{f}: {n} lines (front/ and worker/ files stay under {MAX_LINES})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", help="the build folder (checks objects and binaries too)")
    ap.add_argument("--no-sizes", action="store_true", help="skip the file-size rule")
    args = ap.parse_args()
    files = sorted(sources())
    graph = {f: includes(f) for f in files}
    problems = []
    check_folders(files, graph, problems)
    check_loops(files, graph, problems)
    if not args.no_sizes:
        check_sizes(files, problems)
    if args.build:
        build = os.path.join(ROOT, args.build) if not os.path.isabs(args.build) else args.build
        check_front_objects(build, problems)
        check_binaries(build, problems)
    for p in problems:
        print("layout:", p)
    print(f"layout: {len(files)} sources, {sum(len(v) for v in graph.values())} includes, "
          f"{len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
