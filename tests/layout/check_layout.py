#!/usr/bin/env python3
"""The tree's rules (docs/architecture.md), checked over the sources and the build:

- folders: common/ includes only common/; server/front/ only common/ and server/front/;
  server/worker/ common/, server/worker/ and kernels/; kernels/ only kernels/ and common/ (the
  CUDA-free problem description);
- rooms: inside the front, a file includes and calls only its own room and the rooms below it
  (ROOMS); nothing reaches up (store/ and tensors/ never reach http/ or routes/);
- no circles: no include loop, and no two files that call each other, directly or through
  others (the calls are read off the objects: a file's undefined symbols against the file
  that defines them);
- no CUDA header reaches an object of the front (the .d files of common/ and server/front/
  objects), `ldd attnd` lists no CUDA library, and attnd-worker does link cuBLAS and CUPTI;
- every room of the front says what it owns (README.md), and no folder holds more than
  MAX_FOLDER_SOURCES sources;
- a run-time module (RUNTIME_MODULES: a folder built apart into a shared library the worker
  dlopens) has a README.md, its files include only their own folder (the library they wrap
  comes in with <>), the rest of the tree includes only the module's interface headers, and
  the worker defines none of the module's functions (it loads them, never links them).

Exit 0 when every rule holds, else 1 with every breach listed.
"""
import argparse
import os
import re
import subprocess
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDERS = ("common", "server/front", "server/worker", "kernels")
ALLOWED = {
    "common": {"common"},
    "server/front": {"common", "server/front"},
    "server/worker": {"common", "server/worker", "kernels"},
    "kernels": {"common", "kernels"},
}
# The front's rooms, each with the rooms it may reach (include or call) besides its own and
# common/. "main", "records", "metrics" and "install_path" are the files at the front's root.
ROOMS = {
    "main": {"routes", "batch", "studies", "tensors", "pool", "metrics", "records", "store", "http", "install_path"},
    "routes": {"studies", "tensors", "pool", "metrics", "records", "store", "http", "install_path"},
    "batch": {"studies", "pool", "metrics", "records", "store", "install_path"},
    "studies": {"tensors", "pool", "metrics", "records", "store"},
    "tensors": {"pool", "metrics", "records", "store"},
    "pool": {"metrics", "records", "store"},
    "metrics": {"records", "store"},
    "records": {"store"},
    "store": set(),
    "http": set(),
    "install_path": set(),
}
MAX_FOLDER_SOURCES = 16  # about 15: past it a folder wants rooms
# Run-time modules: folder → (the headers the rest of the tree may include, the prefix of the
# functions the module exports). kernels/flashinfer/ is libattnd_flashinfer.so (make flashinfer).
RUNTIME_MODULES = {
    "kernels/flashinfer": ({"kernels/flashinfer/flashinfer_abi.h", "kernels/flashinfer/flashinfer_layout.h"},
                           "attnd_fi_"),
}
SOURCE = re.compile(r"\.(c|h|cu|cuh)$")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
CUDA_FILE = re.compile(r"(/cuda[^/]*/|cudnn|cublas|cupti|nvml|cuda_runtime|nvToolsExt|/targets/x86_64-linux/)")
CUDA_LIB = re.compile(r"lib(cuda|cudart|cublas|cublasLt|cupti|cudnn|nvidia-ml|nvrtc)\b")


def folder_of(path):
    for folder in FOLDERS:
        if path.startswith(folder + "/"):
            return folder
    return None


def room_of(path):
    """The front room of a path under server/front/, else None."""
    if not path.startswith("server/front/"):
        return None
    rest = path[len("server/front/"):]
    if "/" in rest:
        return rest.split("/")[0]
    return os.path.splitext(rest)[0]


def module_of(path):
    return os.path.splitext(path)[0]


def sources():
    for folder in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(ROOT, folder)):
            for n in names:
                if SOURCE.search(n):
                    yield os.path.relpath(os.path.join(dirpath, n), ROOT)


def includes(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return INCLUDE.findall(f.read())


def module_of_path(path):
    """The run-time module folder a path lies in, else None."""
    for folder in RUNTIME_MODULES:
        if path.startswith(folder + "/"):
            return folder
    return None


def check_module_reach(src, dst, problems):
    """An include between a run-time module and the rest of the tree: the module keeps to
    itself, and the tree sees only its interface."""
    a, b = module_of_path(src), module_of_path(dst)
    if a and b != a:
        problems.append(f"{src}: includes {dst}, but the run-time module {a}/ includes only its own folder")
    elif b and a != b and dst not in RUNTIME_MODULES[b][0]:
        problems.append(f"{src}: includes {dst}, which is inside the run-time module {b}/; "
                        f"only {sorted(RUNTIME_MODULES[b][0])} are its interface")


def check_reach(src, dst, how, problems):
    """One include or call from src to dst against the folders' and the rooms' rules."""
    top, target = folder_of(src), folder_of(dst)
    if target is None or target not in ALLOWED[top]:
        problems.append(f"{src}: {how} {dst}, but {top}/ may reach only {sorted(ALLOWED[top])}")
        return
    a, b = room_of(src), room_of(dst)
    if a and b and a != b:
        if a not in ROOMS or b not in ROOMS:
            problems.append(f"{src}: {how} {dst}: room '{a if a not in ROOMS else b}' is not in ROOMS")
        elif b not in ROOMS[a]:
            problems.append(f"{src}: {how} {dst}: the {a} room may not reach up to {b}")


def check_includes(files, graph, problems):
    for f in files:
        for inc in graph[f]:
            if inc == "build_info_values.h":  # generated into $(BUILD) by the Makefile
                continue
            if "/" not in inc:
                problems.append(f"{f}: includes \"{inc}\": name project headers from the root (folder/file.h)")
            elif not os.path.exists(os.path.join(ROOT, inc)):
                problems.append(f"{f}: includes {inc}, which does not exist")
            else:
                check_reach(f, inc, "includes", problems)
                check_module_reach(f, inc, problems)


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in graph:
                    continue
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                elif nxt in on:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def check_include_loops(files, graph, problems):
    # A .c file including its own header is normal; a loop is a header cycle, or modules (a.c
    # with a.h) that include each other's header, directly or through other modules. A header
    # without a .c (a private header shared by a room's files) is no module of its own.
    for comp in cycles({f: set(graph[f]) for f in files}):
        problems.append("include loop: " + " -> ".join(comp))
    sources = {module_of(f) for f in files if f.endswith((".c", ".cu"))}
    mods = defaultdict(set)
    for f in files:
        if module_of(f) not in sources:
            continue
        for inc in graph[f]:
            if module_of(inc) in sources and module_of(inc) != module_of(f):
                mods[module_of(f)].add(module_of(inc))
    for comp in cycles(mods):
        problems.append("modules include each other: " + ", ".join(comp))


def object_symbols(build):
    """{source path: (defined, undefined)} for every object of common/, server/ and kernels/."""
    table = {}
    for folder in FOLDERS:
        base = os.path.join(build, folder)
        for dirpath, _, names in os.walk(base):
            for n in names:
                if not n.endswith(".o"):
                    continue
                obj = os.path.join(dirpath, n)
                rel = os.path.relpath(obj, build)[:-2]
                src = next((rel + ext for ext in (".c", ".cu") if os.path.exists(os.path.join(ROOT, rel + ext))), None)
                if src is None:
                    continue
                out = subprocess.run(["nm", obj], capture_output=True, text=True).stdout
                defined, undefined = set(), set()
                for line in out.splitlines():
                    p = line.split()
                    if len(p) == 3 and p[1] in "TDBRVW":
                        defined.add(p[2])
                    elif len(p) == 2 and p[0] == "U":
                        undefined.add(p[1])
                table[src] = (defined, undefined)
    return table


def check_calls(build, problems):
    """Returns the number of calls between files that were checked."""
    table = object_symbols(build)
    if not table:
        problems.append(f"no objects under {build}: build first")
        return 0
    owner = {sym: src for src, (defined, _) in table.items() for sym in defined}
    calls = defaultdict(set)
    for src, (_, undefined) in table.items():
        for sym in undefined:
            dst = owner.get(sym)
            if dst and dst != src:
                calls[src].add(dst)
                check_reach(src, dst, f"calls {sym} of", problems)
    for comp in cycles({src: calls[src] for src in table}):
        problems.append("files call each other: " + " -> ".join(shortest_cycle(comp, calls)))
    return sum(len(v) for v in calls.values())


def shortest_cycle(comp, graph):
    """One shortest circle through the first node of a strongly connected component."""
    start, inside = comp[0], set(comp)
    parent, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for node in frontier:
            for succ in sorted(graph[node] & inside):
                if succ == start:
                    path = [node]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return list(reversed(path)) + [start]
                if succ not in parent:
                    parent[succ] = node
                    nxt.append(succ)
        frontier = nxt
    return comp


def check_front_objects(build, problems):
    checked = 0
    for folder in ("common", "server/front"):
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
        problems.append(f"no .d files of common/ or server/front/ objects under {build}: build first")


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
    defined = subprocess.run(["nm", "--defined-only", worker], capture_output=True, text=True).stdout
    for folder, (_, prefix) in sorted(RUNTIME_MODULES.items()):
        linked = sorted({line.split()[-1] for line in defined.splitlines()
                         if line.split() and line.split()[-1].startswith(prefix)})
        if linked:
            problems.append(f"{worker} defines {', '.join(linked[:3])}: the run-time module {folder}/ is linked into "
                            "the worker; it must only be dlopened")
    wout = subprocess.run(["ldd", worker], capture_output=True, text=True).stdout
    if "libcublas" not in wout or "libcupti" not in wout:
        problems.append(f"ldd {worker}: expected cuBLAS and CUPTI in the worker, got:\n{wout}")


def check_folders(files, problems):
    per_folder = defaultdict(int)
    for f in files:
        if f.endswith((".c", ".cu")):
            per_folder[os.path.dirname(f)] += 1
    for folder, n in sorted(per_folder.items()):
        if n > MAX_FOLDER_SOURCES:
            problems.append(f"{folder}/: {n} sources (at most {MAX_FOLDER_SOURCES}: split it into rooms)")
    for folder in sorted(RUNTIME_MODULES):
        if not os.path.exists(os.path.join(ROOT, folder, "README.md")):
            problems.append(f"{folder}/ has no README.md saying what the module is and how it is built")
    front = os.path.join(ROOT, "server/front")
    for name in sorted(os.listdir(front)):
        if os.path.isdir(os.path.join(front, name)):
            if name not in ROOMS:
                problems.append(f"server/front/{name}/ is not a room of ROOMS")
            if not os.path.exists(os.path.join(front, name, "README.md")):
                problems.append(f"server/front/{name}/ has no README.md saying what it owns")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", help="the build folder (checks calls, objects and binaries too)")
    args = ap.parse_args()
    files = sorted(sources())
    graph = {f: includes(f) for f in files}
    problems, ncalls = [], 0
    check_includes(files, graph, problems)
    check_include_loops(files, graph, problems)
    check_folders(files, problems)
    if args.build:
        build = os.path.join(ROOT, args.build) if not os.path.isabs(args.build) else args.build
        ncalls = check_calls(build, problems)
        check_front_objects(build, problems)
        check_binaries(build, problems)
    for p in problems:
        print("layout:", p)
    print(f"layout: {len(files)} sources, {sum(len(v) for v in graph.values())} includes, "
          f"{ncalls} calls between files, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
