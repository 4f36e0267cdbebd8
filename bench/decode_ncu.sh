#!/usr/bin/env bash
# bench/decode_ncu.sh — why a decode kernel falls short of the memory wall: ncu's counters for
# flash's split-KV decode and cudnn's on the same shape, side by side. Decode moves bytes, so
# the questions are DRAM throughput, how many warps each SM keeps in flight, and what they
# wait on (long scoreboard: global loads).
#
#   bash bench/decode_ncu.sh [SHAPE] [FUSED_CHECK...]
#     SHAPE        fused_check --shape form (default the GQA decode target: 64,32,1:8192,128,none,8)
#     FUSED_CHECK  one or more fused_check binaries (default build/test/fused_check); a second one
#                  (the build before, or a branch) profiles its flash@splitkv beside this one's
#   OUT            where the CSVs and the table go (default /tmp/attnd-decode-ncu)
#
# One cool forward a kernel (--clock-control none, a few launches after the warm-ups): ncu's
# times are not sustained ones (docs/performance.md), its counts and ratios are the point.
set -u
cd "$(dirname "$0")/.."
SHAPE=${1:-64,32,1:8192,128,none,8}
shift || true
BINS=("$@")
[ ${#BINS[@]} -gt 0 ] || BINS=(build/test/fused_check)
OUT=${OUT:-/tmp/attnd-decode-ncu}
mkdir -p "$OUT"
CUDNN_DIR=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
# decode kernels: flash's split and combine, cuDNN's SDPA (its names carry sdpa or fmha)
KERNELS='regex:splitkv|sdpa|fmha|cudnn'
# ncu's standard sections (their metric names are stable across releases; raw names are not)
SECTIONS=(--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats
          --section WarpStateStats)
# what the table keeps of them (the CSVs hold everything)
export KEEP="Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Theoretical Occupancy|Registers Per Thread|Block Limit Registers|Grid Size|Block Size|Waves Per SM|Warp Cycles Per Issued Instruction|Issued Warp Per Scheduler"
# One ncu run a binary and variant: ncu stops after --launch-count kernels, so a run of both
# variants would profile only the first one's. cudnn once: the same library in every build.
i=0
for bin in "${BINS[@]}"; do
    variants="flash@splitkv"
    [ $i -eq 0 ] && variants="flash@splitkv cudnn"
    for only in $variants; do
        csv="$OUT/ncu-$i-${only%%@*}.csv"
        ncu --clock-control none -k "$KERNELS" --launch-skip 4 --launch-count 6 "${SECTIONS[@]}" --csv \
            "$bin" --timing-only --shape "$SHAPE" --only "$only" ${CUDNN_DIR:+--cudnn "$CUDNN_DIR"} --repeats 1 \
            > "$csv" 2> "${csv%.csv}.log"
        echo "$bin $only: rc $? ($csv)"
    done
    i=$((i + 1))
done

# One row a kernel and metric (the median over the launches profiled), every build's.
python3 - "$OUT" <<'EOF' | tee "$OUT/table.md"
import csv, glob, io, os, re, statistics, sys
keep = re.compile("^(%s)$" % os.environ["KEEP"])
rows = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "ncu-*.csv"))):
    text = open(path, errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        print("%s: no ncu table (see its .log)" % path)
        continue
    for r in csv.DictReader(io.StringIO(text[start:])):
        if not keep.match(r.get("Metric Name", "")):
            continue
        key = (os.path.basename(path), r.get("Kernel Name", "?")[:60], r.get("Metric Name", "?"), r.get("Metric Unit", ""))
        try:
            rows.setdefault(key, []).append(float(r.get("Metric Value", "").replace(",", "")))
        except ValueError:
            pass
print("| build | kernel | metric | median |")
print("| --- | --- | --- | --- |")
for (build, kernel, metric, unit), vals in sorted(rows.items()):
    print("| %s | %s | %s | %.4g %s |" % (build, kernel, metric, statistics.median(vals), unit))
EOF
