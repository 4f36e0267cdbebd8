#!/bin/sh
# Build the libFuzzer targets of the parsers of untrusted bytes (uploads, the run body's
# JSON) and run each for a bounded time.
#   tests/fuzz/run.sh BUILD_DIR SECONDS
# Needs clang with -fsanitize=fuzzer (scripts/install-deps.sh installs Debian's clang);
# without it, says so and skips (exit 0).
set -e
out=${1:-build/fuzz}
secs=${2:-13}
cc=${CLANG:-clang}
mkdir -p "$out"
if ! command -v "$cc" >/dev/null 2>&1; then
    echo "fuzz: SKIPPED: $cc not found (scripts/install-deps.sh installs clang)"
    exit 0
fi
printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' > "$out/probe.c"
if ! "$cc" -fsanitize=fuzzer,address "$out/probe.c" -o "$out/probe" >/dev/null 2>&1; then
    echo "fuzz: SKIPPED: $cc cannot link -fsanitize=fuzzer,address (install clang's libFuzzer runtime)"
    exit 0
fi
flags="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -D_GNU_SOURCE -I."
"$cc" $flags tests/fuzz/fuzz_npy.c common/npy.c common/attn.c -o "$out/fuzz_npy" -lm
"$cc" $flags tests/fuzz/fuzz_safetensors.c server/front/tensors/safetensors.c common/json_text.c common/attn.c -o "$out/fuzz_safetensors" -lcjson -lm
"$cc" $flags tests/fuzz/fuzz_json_text.c common/json_text.c -o "$out/fuzz_json_text" -lcjson -lm

# Seeds: a valid input of each kind (an upload with its mode byte first, a run body), so the
# fuzzer starts inside the grammar.
mkdir -p "$out/corpus_npy" "$out/corpus_safetensors" "$out/corpus_json_text"
printf '\000\223NUMPY\001\000\106\000{'"'"'descr'"'"': '"'"'<f4'"'"', '"'"'fortran_order'"'"': False, '"'"'shape'"'"': (2,), }          \n\000\000\000\000\000\000\000\000' > "$out/corpus_npy/seed1"
printf '\002\223NUMPY\002\000\106\000\000\000{'"'"'descr'"'"': '"'"'|V2'"'"', '"'"'fortran_order'"'"': False, '"'"'shape'"'"': (1, 2), }      \n\000\000\000\000' > "$out/corpus_npy/seed2"
printf '\000\070\000\000\000\000\000\000\000{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}\000\000\000\000' > "$out/corpus_safetensors/seed1"
printf '\000\116\000\000\000\000\000\000\000{"__metadata__":{"f":"pt"},"b":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]}}\000\000\000\000' > "$out/corpus_safetensors/seed2"
printf '{"backend": "math", "batch": 1e3, "seq": 8, "scale": 2.5e-1, "q": "t4", "verify": true}' > "$out/corpus_json_text/seed1"
printf '\357\273\277{"b\\u0061tch":\t8.0, "a": [1, {"b": -0}], "c": "x\\"}", "d": null, "e": -12E+2}' > "$out/corpus_json_text/seed2"

status=0
passed=0
failed=0
for t in npy safetensors json_text; do
    echo "fuzz: $t for ${secs}s"
    if ! "$out/fuzz_$t" -max_total_time="$secs" -rss_limit_mb=2048 -max_len=4096 -print_final_stats=0 \
            -artifact_prefix="$out/crash_$t-" "$out/corpus_$t" > "$out/fuzz_$t.log" 2>&1; then
        echo "fuzz: $t FAILED; the end of its log ($out/fuzz_$t.log):"
        tail -40 "$out/fuzz_$t.log"
        status=1
        failed=$((failed + 1))
    else
        echo "fuzz: $t ok: $(grep -o 'Done [0-9]* runs[^$]*' "$out/fuzz_$t.log" | tail -1)"
        passed=$((passed + 1))
    fi
done
echo "fuzz: $passed passed, $failed failed"
exit $status
