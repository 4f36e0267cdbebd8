#!/usr/bin/env bash
# scripts/gpu-build-base.sh — build an earlier commit for sm_90a, as "the build before" that a
# lent-GPU call compares this tree with (scripts/gpu-session.sh's BASE_BUILD and BASE_CONFIG).
#
#   scripts/gpu-build-base.sh REV [DIR]     (DIR default build/base)
#
# REV's tree is unpacked into DIR/src (git archive: no checkout is touched) and built there.
# DIR then holds what the commit had of attnd, attnd-worker (from when the front and the worker
# became two binaries) and fused_check, its config file as DIR/attnd.json (an older build may
# refuse today's keys: pass BASE_CONFIG=DIR/attnd.json), the libraries a GPU machine lacks in
# DIR/lib (the binaries look there: RUNPATH $ORIGIN/lib) and DIR/rev. Then pack it beside this
# tree's build: BASE_BUILD=DIR GPU_PACK=… scripts/gpu-build.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: $0 REV [DIR]}
dir=${2:-build/base}
GENCODE=${GENCODE:-"-gencode arch=compute_90a,code=sm_90a"}
commit=$(git rev-parse --verify "$rev^{commit}")
src=$dir/src
# A tree from another commit is replaced; the same commit's keeps its objects (make resumes).
if [ "$(cat "$src/.rev" 2>/dev/null)" != "$commit" ]; then
    rm -rf "$src"
    mkdir -p "$src"
    git archive "$commit" | tar -x -C "$src"
    echo "$commit" > "$src/.rev"
fi
out=$(cd "$src" && pwd)/build-sm90a
targets=()
for t in attnd attnd-worker fused_check; do # the ones this commit's Makefile has a rule for
    if make -C "$src" -n BUILD="$out" GENCODE="$GENCODE" "$out/$t" > /dev/null 2>&1; then targets+=("$out/$t"); fi
done
[ ${#targets[@]} -gt 0 ] || { echo "gpu-build-base: $rev's Makefile builds none of attnd, attnd-worker, fused_check" >&2; exit 1; }
make -C "$src" -j"$(nproc)" BUILD="$out" GENCODE="$GENCODE" "${targets[@]}"
for t in "${targets[@]}"; do cp "$t" "$dir/"; done
if [ -f "$src/config/attnd.json" ]; then cp "$src/config/attnd.json" "$dir/attnd.json"; fi
sh scripts/bundle-libs.sh "$dir"
echo "$commit" > "$dir/rev"
echo "built $rev ($commit) into $dir: $(cd "$dir" && ls -d attnd* fused_check 2>/dev/null | tr '\n' ' ')"
