#!/usr/bin/env bash
# scripts/gpu-build.sh — build here (no GPU needed) everything a lent-GPU call runs, so the call
# spends its minutes running, not compiling: $GPU_BUILD/attnd and attnd-worker for sm_90a with
# their libraries beside them ($GPU_BUILD/lib, FlashInfer's module libattnd_flashinfer.so among
# them: make flashinfer, slow the first time; GPU_FLASHINFER=0 skips it and tests/gpu then skips
# the flashinfer variant) and the fused-kernel harness $GPU_BUILD/fused_check. GPU_BUILD defaults to build/test; another folder lets `make test` run
# here meanwhile. Then, with the device tool: carry ["$GPU_BUILD"] (or its four entries) and run
# GPU_BUILD=… scripts/gpu-session.sh (everything) or scripts/gpu-quick.sh (a subset of tests/gpu).
#
# make rebuilds whatever was compiled with other flags (the Makefile's $(BUILD)/.flags), so
# objects left from a plain sm_90 build, which lack the wgmma kernel, do not survive.
set -euo pipefail
cd "$(dirname "$0")/.."
GENCODE=${GENCODE:-"-gencode arch=compute_90a,code=sm_90a"}
B=${GPU_BUILD:-build/test}
# the unit tests with GPU cases (gpu-session.sh's unit phase: cuDNN's loader and serving batches)
UNIT_GPU_BINS=("$B/tests/unit/kernels/test_cudnn_loader" "$B/tests/unit/kernels/test_cudnn_serving")
make -j"$(nproc)" BUILD="$B" GENCODE="$GENCODE" "$B/attnd" "$B/attnd-worker" "$B/fused_check" "$B/read_ceiling" "$B/nvml_cost" "$B/cupti_cost" "${UNIT_GPU_BINS[@]}"
sh scripts/bundle-libs.sh "$B"
if [ "${GPU_FLASHINFER:-1}" = 1 ]; then
    nice make BUILD="$B" GENCODE="$GENCODE" flashinfer
fi
echo "built: $B/attnd, $B/attnd-worker, $B/lib/, $B/fused_check, $B/read_ceiling, $B/nvml_cost, $B/cupti_cost, ${UNIT_GPU_BINS[*]}"
# A call carries 64 MiB of working tree at most, and a build is ~45 MB: GPU_PACK=FILE (under
# build/) packs it, and the build before when BASE_BUILD names one inside the repository
# (e.g. build/base, from scripts/gpu-build-base.sh REV), into one xz tarball of ~13 MB a
# build; carry FILE, and gpu-session.sh unpacks it when given GPU_PACK=FILE there.
if [ -n "${GPU_PACK:-}" ]; then
    base=() # what the build before has (scripts/gpu-build-base.sh: an older commit may lack some)
    if [ -n "${BASE_BUILD:-}" ]; then
        for f in attnd attnd-worker fused_check attnd.json lib rev; do
            if [ -e "$BASE_BUILD/$f" ]; then base+=("$BASE_BUILD/$f"); fi
        done
    fi
    tar -cf - "$B/attnd" "$B/attnd-worker" "$B/fused_check" "$B/read_ceiling" "$B/nvml_cost" "$B/cupti_cost" "${UNIT_GPU_BINS[@]}" "$B/lib" "${base[@]}" | xz -T0 -6 > "$GPU_PACK"
    echo "packed: $GPU_PACK ($(du -h "$GPU_PACK" | cut -f1))"
fi
