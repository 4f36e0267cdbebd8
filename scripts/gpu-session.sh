#!/usr/bin/env bash
# scripts/gpu-session.sh — one lent-GPU call that checks everything GPU-side, and compares it with
# the build before when one is given. Build first, on a machine without a GPU
# (scripts/gpu-build.sh for this tree, and the same for the build before); then carry both.
#
#   GPU_BUILD    this build: attnd, attnd-worker, lib/, fused_check (default build/test)
#   BASE_BUILD   the build before, for the A/Bs (its fused_check, attnd and attnd-worker:
#                scripts/gpu-build-base.sh REV builds one); unset: none
#   BASE_CONFIG  the config file the build before reads (an older build may not read today's);
#                default BASE_BUILD/attnd.json where there is one (gpu-build-base.sh puts it there)
#   GPU_PACK     a tarball of the builds from scripts/gpu-build.sh (GPU_PACK=… there), unpacked first
#   PHASES       which of: ab throughput builds fused sanitize unit tests pending targets studies transfers ncu
#                bench (default: all but targets, studies, transfers, ncu and bench). A lent call runs
#                10 minutes at most: all of them take longer, so split them over calls, e.g. "fused
#                pending unit", then "ab throughput sanitize", then "tests", then "targets studies ncu"
#   STUDY_SHAPES the studies phase's decode shapes, bench/decode_study.py's B,H,Hkv,SQ,SKV,D[,MASK[,PAGE]]
#                (default the decode targets: GQA and its paged twin, MHA, few long sequences,
#                speculative); STUDY_VARIANTS (default flash:splitkv,cudnn,flashinfer); STUDY_CACHE
#                hot (default) or cold (L2 flushed before every timed forward); STUDY_PARAMS more
#                studies as decode_study.py --params JSON objects separated by '|' (a ragged prefill
#                and its dense twin), run with STUDY_PARAMS_VARIANTS (default flash,cudnn,flashinfer)
#   PENDING_TESTS the pending phase's tests/gpu files (default the serving ones; name those of a feature
#                written but not yet validated)
#   FUSED_ARGS   more fused_check arguments for the fused phase, e.g. "--sections head_dim_v,decode"
#   SANITIZE_TOOLS, SANITIZE_ARGS  the sanitize phase's compute-sanitizer tools (default memcheck
#                racecheck synccheck) and more fused_check arguments (e.g. "--sections dense")
#   TARGET_SHAPES the targets phase's shapes (default today's models: GQA, windows, D256, D96, DeepSeek's
#                192/128), fused_check --shape form
#   DECODE_SHAPES the targets phase's decode shapes for flash@splitkv against cudnn (default the issue's
#                MHA and GQA decode), B,H,Sq:Skv,D,mask[,Hkv]
#   THROUGHPUT_BUILDS  the throughput phase's builds, comma-separated, the first the baseline (default
#                BASE_BUILD and this build); THROUGHPUT_CONFIGS more "--config-of BUILD=FILE" words
#   BUILDS       the builds phase's builds, "NAME=DIR ..." (the first is the base; default
#                "base=BASE_BUILD head=GPU_BUILD"); a DIR with attnd-worker alone (an experiment's
#                worker) borrows GPU_BUILD's attnd and lib/. BUILDS_SHAPES bench/builds_ab.py's shapes
#                (default the GQA decodes, pages of 16 and Sq4), BUILDS_PARAMS more cases as JSON objects
#                of run parameters, '|'-separated (a ragged batch); BUILDS_VARIANTS one A/B each (default
#                flash; flash:splitkv names an impl); BUILDS_REF the variant (or backend:impl) beside them on the base's
#                server (cudnn; empty: none); BUILDS_ROUNDS (4); BUILDS_TESTS tests/gpu files
#                run through every build but the first after the A/Bs (default none), or through
#                those BUILDS_TESTS_ON names (space-separated; the first among them);
#                BUILDS_TIMEOUT_S (300 an A/B), BUILDS_TESTS_TIMEOUT_S (150 a build)
#   AB_SHAPES    the A/B's shapes, fused_check --shape form (default the study's and
#                B2 H16 S8192 D128 causal); AB_ROUNDS, AB_WINDOW_MS (2, 2000)
#   UNIT_GPU     unit-test binaries with GPU cases (default the cuDNN variant's: loader, serving batches)
#   OUT          where logs go (default /tmp/attnd-gpu-out): at most 8 files come back
#
# Phases: ab — flash@tma of both builds and cudnn, one at a time in isolated windows
# (bench/isolated_windows.py: power, clock and energy beside the time); throughput — small runs
# served a second by both builds, without and with verify (bench/served_throughput.py); builds —
# one variant under several builds' servers on the card, alternated under the server's stopping
# rule, with cudnn beside (bench/builds_ab.py), then BUILDS_TESTS on each; fused — fused_check
# --quick, every flash/efficient configuration against its reference; sanitize — fused_check
# --quick --small over every flash impl under compute-sanitizer's memcheck, racecheck and
# synccheck; unit — the GPU cases of
# the unit tests; tests — tests/gpu through attnd (tests/gpu/run.sh, without the bench); pending —
# the tests/gpu files that check the variants' pending_features, against a server that offers
# them (ATTND_PENDING_FEATURES=true): what must pass before a feature moves to `features`; targets —
# flash and cudnn one at a time in isolated windows on TARGET_SHAPES; studies — the read ceiling
# (bench/read_ceiling.cu), then STUDY_SHAPES as attnd studies, each variant's TB/s against it
# (bench/decode_study.py, sustained, the variants alternated); transfers — 1 GiB up and
# down through curl (tests/gpu/test_tensors.py; with BASE_BUILD, both builds through
# bench/served_transfers.py) beside what curl alone reaches on this machine
# (bench/loopback_ceiling.py); ncu — bench/decode_ncu.sh, ncu's counters of flash's split-KV
# decode and cudnn's; bench — bench/run.sh, attnd against PyTorch. A short table comes last.
set -u
cd "$(dirname "$0")/.." || exit 2
B=${GPU_BUILD:-build/test}
# GPU_PACK: the tarball scripts/gpu-build.sh packed (the builds, under 64 MiB to carry).
if [ -n "${GPU_PACK:-}" ]; then tar -xJf "$GPU_PACK" || { echo "gpu-session: cannot unpack $GPU_PACK" >&2; exit 2; }; fi
if [ -z "${BASE_CONFIG:-}" ] && [ -n "${BASE_BUILD:-}" ] && [ -f "$BASE_BUILD/attnd.json" ]; then
    BASE_CONFIG=$BASE_BUILD/attnd.json
fi
OUT=${OUT:-/tmp/attnd-gpu-out}; mkdir -p "$OUT"
PHASES=${PHASES:-"ab throughput fused sanitize unit tests pending"}
export ATTND_BIN=${ATTND_BIN:-$PWD/$B/attnd} OUT
# The cuDNN PyTorch loads: the cudnn rows and variant compare like with like.
# nvidia.cudnn is a namespace package in recent wheels: __file__ is None there, __path__ works.
CUDNN_DIR=$(python3 -c "import nvidia.cudnn, os; print(os.path.join(list(nvidia.cudnn.__path__)[0], 'lib'))" 2>/dev/null)
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
note() { echo "$1|$2" >> "$SUMMARY"; }
# Without it the cudnn rows are refused, and the table would lack its comparator silently.
[ -n "$CUDNN_DIR" ] || note cudnn "PyTorch's cuDNN not importable (nvidia.cudnn): no cudnn rows"
has() { case " $PHASES " in *" $1 "*) return 0 ;; esac; return 1; }
# Appends to array $1 a `--params OBJECT` pair for each of $2's '|'-separated JSON objects.
add_params() {
    local -n into=$1
    local objects object
    IFS='|' read -r -a objects <<< "$2"
    for object in "${objects[@]}"; do into+=(--params "$object"); done
}
. scripts/serve-attnd.sh
# attnd $1 on a free port with PyTorch's cuDNN, its stderr to $2; sets url and pid once it is ready
# (a server that does not start is noted, and its url left empty).
serve() {
    ATTND_CUDNN_LIBRARY="${CUDNN_DIR:-}" attnd_serve "$1" "$(mktemp -d)" "$2" --devices all --job-timeout-s 300 \
        --log-level warn || note attnd "$1 did not start (stderr in $(basename "$2"))"
    pid=$ATTND_SERVE_PID
    url=$ATTND_SERVE_URL
}
T0=$(date +%s)

if has ab && [ -n "${BASE_BUILD:-}" ]; then
    : > "$OUT/ab.log"
    for shape in ${AB_SHAPES:-8,16,1024,64,causal 2,16,8192,128,causal}; do
        timeout -k 5 150 python3 bench/isolated_windows.py --fused-check "$B/fused_check" --shape "$shape" \
            --variants "$BASE_BUILD/fused_check:flash@tma,flash@tma,cudnn" ${CUDNN_DIR:+--cudnn "$CUDNN_DIR"} \
            --rounds "${AB_ROUNDS:-2}" --window-ms "${AB_WINDOW_MS:-2000}" >> "$OUT/ab.log" 2>&1
        grep -E '^flash@tma:|^cudnn:' "$OUT/ab.log" | tail -n 2 | while read -r line; do note "ab $shape" "$line"; done
    done
fi

if has throughput && [ -n "${BASE_BUILD:-}" ] && [ -x "$BASE_BUILD/attnd" ]; then
    # shellcheck disable=SC2086  # THROUGHPUT_CONFIGS: words of their own
    timeout -k 10 "${THROUGHPUT_TIMEOUT_S:-240}" python3 bench/served_throughput.py \
        --builds "${THROUGHPUT_BUILDS:-$BASE_BUILD,$B}" ${BASE_CONFIG:+--config-of "$BASE_BUILD=$BASE_CONFIG"} \
        ${THROUGHPUT_CONFIGS:-} --seconds "${THROUGHPUT_SECONDS:-10}" --rounds 2 \
        --json "$OUT/throughput.json" > "$OUT/throughput.log" 2>&1
    note "throughput" "rc $?"
    grep -E '^\| ' "$OUT/throughput.log" | grep -vE '^\| (build \||---)' | while read -r line; do note "  runs/s" "${line:0:150}"; done
    grep 'worker ms by phase' "$OUT/throughput.log" | head -n 2 | while read -r line; do note "  phases" "${line:0:250}"; done
    if [ -x "$B/nvml_cost" ]; then # what the NVML reads of a run cost on this machine
        timeout -k 5 30 "$B/nvml_cost" --reads 200 > "$OUT/nvml_cost.log" 2>&1
        grep '^| nvml' "$OUT/nvml_cost.log" | while read -r line; do note "  nvml us" "$line"; done
    fi
fi

if has builds && [ -n "${BUILDS:-}${BASE_BUILD:-}" ]; then
    read -r -a specs <<< "${BUILDS:-"base=${BASE_BUILD:-} head=$B"}"
    ab=()
    pids=()
    for spec in "${specs[@]}"; do
        name=${spec%%=*}
        dir=${spec#*=}
        [ -x "$dir/attnd" ] || cp "$B/attnd" "$dir/"
        [ -d "$dir/lib" ] || [ ! -d "$B/lib" ] || cp -r "$B/lib" "$dir/"
        serve "$dir/attnd" "$OUT/builds-attnd-$name.log"
        ab+=(--build "$name=$url")
        pids+=("$pid")
    done
    shapes=()
    for shape in ${BUILDS_SHAPES:-64,32,8,1,8192,128 8,64,8,1,32768,128 64,32,8,1,8192,128,none,16 \
                  64,32,8,4,8192,128,causal_bottom_right}; do shapes+=(--shape "$shape"); done
    [ -z "${BUILDS_PARAMS:-}" ] || add_params shapes "$BUILDS_PARAMS"
    : > "$OUT/builds.log"
    for variant in ${BUILDS_VARIANTS:-flash}; do
        timeout -k 5 "${BUILDS_TIMEOUT_S:-300}" python3 bench/builds_ab.py "${ab[@]}" --variant "$variant" \
            --ref "${BUILDS_REF-cudnn}" --rounds "${BUILDS_ROUNDS:-4}" "${shapes[@]}" \
            --json "$OUT/builds-${variant//:/-}.json" >> "$OUT/builds.log" 2>&1
        note "builds A/B of $variant" "rc $? (table in builds.log)"
    done
    grep -E '^B[0-9]|^ragged|^\| [a-z]|cannot run this case' "$OUT/builds.log" | grep -v '^| row' | while read -r line; do note "  " "${line:0:150}"; done
    kill -TERM "${pids[@]}"
    wait "${pids[@]}"
    if [ -n "${BUILDS_TESTS:-}" ]; then
        for spec in "${specs[@]}"; do # every build but the base, or those BUILDS_TESTS_ON names (the base too)
            name=${spec%%=*}
            if [ -n "${BUILDS_TESTS_ON:-}" ]; then
                case " $BUILDS_TESTS_ON " in *" $name "*) ;; *) continue ;; esac
            elif [ "$spec" = "${specs[0]}" ]; then
                continue
            fi
            ATTND_BIN=$(realpath "${spec#*=}/attnd") OUT=$OUT/builds-tests-$name TESTS="$BUILDS_TESTS" \
                TESTS_TIMEOUT_S="${BUILDS_TESTS_TIMEOUT_S:-150}" bash scripts/gpu-quick.sh > "$OUT/builds-tests-$name.log" 2>&1
            note "tests on $name" "$(grep -E '[0-9]+ (passed|failed)' "$OUT/builds-tests-$name/tests.log" | tail -n 1)"
            grep -E '^(FAILED|ERROR)' "$OUT/builds-tests-$name/tests.log" | head -n 5 | while read -r line; do note "  " "${line:0:150}"; done
        done
    fi
fi

if has fused; then
    timeout -k 5 "${FUSED_TIMEOUT_S:-300}" stdbuf -oL "$B/fused_check" --quick ${FUSED_ARGS:-} ${CUDNN_DIR:+--cudnn "$CUDNN_DIR"} > "$OUT/fused.log" 2>&1
    note "fused_check --quick" "rc $?; $(grep -c PASS "$OUT/fused.log") PASS, $(grep -c FAIL "$OUT/fused.log") FAIL"
    grep FAIL "$OUT/fused.log" | head -n 5 | while read -r line; do note "  fail" "${line:0:150}"; done
fi

if has sanitize; then
    : > "$OUT/sanitize.log"
    for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck}; do
        echo "== $tool" >> "$OUT/sanitize.log"
        timeout -k 5 "${SANITIZE_TIMEOUT_S:-240}" compute-sanitizer --tool "$tool" --error-exitcode 99 \
            "$B/fused_check" --quick --small --only 'flash@*' ${SANITIZE_ARGS:-} > "$OUT/sanitize.$tool" 2>&1
        rc=$?
        grep -E 'SUMMARY|ERROR SUMMARY|hazard' "$OUT/sanitize.$tool" | tail -n 3 >> "$OUT/sanitize.log"
        grep -E '^=+ (Error|Warning|Invalid|Race)' "$OUT/sanitize.$tool" | sort | uniq -c | sort -rn | head -n 5 >> "$OUT/sanitize.log"
        note "sanitize $tool" "rc $rc; $(grep -c PASS "$OUT/sanitize.$tool") PASS; $(grep -E 'SUMMARY' "$OUT/sanitize.$tool" | tail -n 1 | cut -c1-110)"
        rm -f "$OUT/sanitize.$tool"
    done
fi

if has unit; then
    : > "$OUT/unit.log"
    for t in ${UNIT_GPU:-$B/tests/unit/kernels/test_cudnn_loader $B/tests/unit/kernels/test_cudnn_serving}; do
        ATTND_CUDNN_LIBRARY="${CUDNN_DIR:-}" timeout -k 5 180 "$t" >> "$OUT/unit.log" 2>&1
        note "unit $(basename "$t")" "rc $?; $(grep -E 'passed, [0-9]+ failed' "$OUT/unit.log" | tail -n 1)"
    done
    grep '^FAIL' "$OUT/unit.log" | head -n 5 | while read -r line; do note "  fail" "${line:0:150}"; done
fi

if has tests; then
    SKIP_BENCH=1 TESTS_TIMEOUT_S=${TESTS_TIMEOUT_S:-480} bash tests/gpu/run.sh > "$OUT/run.log" 2>&1
    note "tests/gpu" "rc $?; $(grep -E '[0-9]+ (passed|failed)' "$OUT/gpu-tests.log" | tail -n 1)"
    grep -E '^(FAILED|ERROR)' "$OUT/gpu-tests.log" | head -n 8 | while read -r line; do note "  fail" "${line:0:160}"; done
fi

if has pending; then
    # Every tests/gpu file that runs pending features, among those this tree has.
    pending_tests=${PENDING_TESTS:-$(ls tests/gpu/test_cudnn_serving.py tests/gpu/test_serving_generic.py 2>/dev/null | tr '\n' ' ')}
    mkdir -p "$OUT/pending"
    ATTND_PENDING_FEATURES=true OUT="$OUT/pending" TESTS="$pending_tests" TESTS_TIMEOUT_S=${PENDING_TIMEOUT_S:-480} \
        bash scripts/gpu-quick.sh > "$OUT/pending.log" 2>&1
    note "pending features" "rc $?; $(grep -E '[0-9]+ (passed|failed)' "$OUT/pending/tests.log" | tail -n 1)"
    grep -E '^(FAILED|ERROR)' "$OUT/pending/tests.log" | head -n 8 | while read -r line; do note "  fail" "${line:0:160}"; done
fi

if has targets; then
    : > "$OUT/targets.log"
    for shape in ${TARGET_SHAPES:-2,64,8192,128,causal,8 4,32,4096,128,none,8 1,32,16384,128,causal,8,4095 \
                   1,32,16384,128,causal,8 8,16,1024,64,causal,4 4,16,4096,256,causal 4,16,4096,256,none \
                   4,32,4096,96,causal 1,128,4096,192,causal,0,-1,128}; do
        timeout -k 5 150 python3 bench/isolated_windows.py --fused-check "$B/fused_check" --shape "$shape" \
            --variants "flash,cudnn" ${CUDNN_DIR:+--cudnn "$CUDNN_DIR"} \
            --rounds "${AB_ROUNDS:-2}" --window-ms "${AB_WINDOW_MS:-2000}" >> "$OUT/targets.log" 2>&1
        grep -E '^flash:|^cudnn:' "$OUT/targets.log" | tail -n 2 | while read -r line; do note "target $shape" "$line"; done
    done
    # Decode: the split-KV kernel (impl=splitkv, named only until measured) against cudnn.
    # fused_check fills a decode's 2-4 GB of K/V on the host, once a variant and round: minutes
    for shape in ${DECODE_SHAPES:-64,32,1:4096,128,none 64,32,1:8192,128,none,8}; do
        timeout -k 5 "${DECODE_TIMEOUT_S:-420}" python3 bench/isolated_windows.py --fused-check "$B/fused_check" --shape "$shape" \
            --variants "flash@splitkv,cudnn" ${CUDNN_DIR:+--cudnn "$CUDNN_DIR"} \
            --rounds "${AB_ROUNDS:-2}" --window-ms "${AB_WINDOW_MS:-2000}" >> "$OUT/targets.log" 2>&1
        grep -E '^flash@splitkv:|^cudnn:' "$OUT/targets.log" | tail -n 2 | while read -r line; do note "decode $shape" "$line"; done
    done
fi

if has transfers; then
    mkdir -p "$OUT/transfers"
    OUT="$OUT/transfers" TESTS="tests/gpu/test_tensors.py -k one_gib" TESTS_TIMEOUT_S=${TRANSFERS_TIMEOUT_S:-300} \
        bash scripts/gpu-quick.sh > "$OUT/transfers.log" 2>&1
    note "transfers 1 GiB (curl)" "$(grep -E '[0-9]+ (passed|failed|error)' "$OUT/transfers/tests.log" | tail -n 1); $(python3 -c 'import json, sys
f = json.load(open(sys.argv[1]))
print("; ".join("%s %.2f GB/s" % (k.split(" GB/s")[0].split("GiB ")[1], f[k]) for k in f if "GB/s (curl, median)" in k))' \
        "$OUT/transfers/gpu-facts.json" 2>/dev/null)"
    if [ -n "${BASE_BUILD:-}" ] && [ -x "$BASE_BUILD/attnd" ]; then # both builds, with the fill's and the send's times
        timeout -k 5 "${TRANSFERS_AB_TIMEOUT_S:-240}" python3 bench/served_transfers.py \
            --builds "$BASE_BUILD,$B" ${BASE_CONFIG:+--config-of "$BASE_BUILD=$BASE_CONFIG"} --rounds 2 \
            --json "$OUT/transfers-ab.json" > "$OUT/transfers-ab.log" 2>&1
        note "transfers, both builds" "rc $?"
        grep -E '^\| ' "$OUT/transfers-ab.log" | grep -vE '^\| (build \||---)' | while read -r line; do note "  " "${line:0:150}"; done
    fi
    timeout -k 5 "${CEILING_TIMEOUT_S:-240}" python3 bench/loopback_ceiling.py --mib 1024 --repeats 3 --copy-blocks 4096,256 \
        > "$OUT/ceiling.json" 2> "$OUT/ceiling.log"
    note "loopback ceiling (curl alone)" "rc $?; $(python3 -c 'import json, sys
c = json.load(open(sys.argv[1]))
print("up %s, down %s GB/s, to /dev/null %s" % (c.get("median upload GB/s"), c.get("median download GB/s"),
                                               c.get("median download to /dev/null GB/s")))' "$OUT/ceiling.json" 2>/dev/null)"
fi

if has studies; then
    timeout -k 5 120 "$B/read_ceiling" --bytes 2147483648 --window-ms 800 --rounds 2 > "$OUT/ceiling.log" 2>&1
    ceiling=$(sed -n 's/^ceiling: \([0-9.]*\) TB\/s/\1/p' "$OUT/ceiling.log")
    note "read ceiling (2 GiB)" "${ceiling:-none} TB/s"
    serve "$ATTND_BIN" "$OUT/studies-attnd.log"
    shapes=()
    for shape in ${STUDY_SHAPES:-64,32,8,1,8192,128 64,32,8,1,8192,128,none,16 64,32,32,1,4096,128 128,32,32,1,2048,128 \
                  8,64,8,1,32768,128 64,32,8,4,8192,128,causal_bottom_right}; do shapes+=(--shape "$shape"); done
    timeout -k 5 "${STUDIES_TIMEOUT_S:-300}" python3 bench/decode_study.py --url "$url" ${ceiling:+--ceiling-tbs "$ceiling"} \
        --variants "${STUDY_VARIANTS:-flash:splitkv,cudnn,flashinfer}" --cache "${STUDY_CACHE:-hot}" "${shapes[@]}" \
        --json "$OUT/studies.json" \
        > "$OUT/studies.log" 2>&1
    note "decode studies" "rc $? (table in studies.log)"
    grep -E '^B[0-9]|^\| [a-z]' "$OUT/studies.log" | grep -v '^| variant' | while read -r line; do note "  " "${line:0:150}"; done
    if [ -n "${STUDY_PARAMS:-}" ]; then
        params=()
        add_params params "$STUDY_PARAMS"
        timeout -k 5 "${STUDIES_TIMEOUT_S:-300}" python3 bench/decode_study.py --url "$url" ${ceiling:+--ceiling-tbs "$ceiling"} \
            --variants "${STUDY_PARAMS_VARIANTS:-flash,cudnn,flashinfer}" --cache "${STUDY_CACHE:-hot}" "${params[@]}" \
            --json "$OUT/studies-params.json" > "$OUT/studies-params.log" 2>&1
        note "studies of STUDY_PARAMS" "rc $? (table in studies-params.log)"
        grep -E '^(B[0-9]|ragged)|^\| [a-z]' "$OUT/studies-params.log" | grep -v '^| variant' | while read -r line; do note "  " "${line:0:150}"; done
    fi
    kill -TERM "$pid"
    wait "$pid"
fi

if has ncu; then
    OUT="$OUT/ncu" timeout -k 5 "${NCU_TIMEOUT_S:-300}" bash bench/decode_ncu.sh "${NCU_SHAPE:-64,32,1:8192,128,none,8}" \
        "$B/fused_check" ${BASE_BUILD:+"$BASE_BUILD/fused_check"} > "$OUT/ncu.log" 2>&1
    note "ncu decode" "rc $?; $(grep -E ': rc [0-9]+' "$OUT/ncu.log" | cut -c1-120 | tr '\n' ' ')(table in ncu.log)"
fi

if has bench; then
    env -u ATTND_URL ATTND_BIN="$ATTND_BIN" timeout -k 10 "${BENCH_TIMEOUT_S:-300}" bash bench/run.sh > "$OUT/bench.log" 2>&1
    note "bench" "rc $?"
fi

note "wall time" "$(( $(date +%s) - T0 )) s"
echo
echo "| what | result |"
echo "| --- | --- |"
sed 's/^\([^|]*\)|\(.*\)$/| \1 | \2 |/' "$SUMMARY"
