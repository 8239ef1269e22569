#!/usr/bin/env bash
# The GPU suite in one command: builds Switchyard and runs
#   1. every GPU test case (ctest -L gpu: EP 1, 2, 4 and 8 on one GPU with co-located ranks, and on
#      two GPUs when present), one CTest entry per case;
#   2. compute-sanitizer memcheck and racecheck on the small HT and LL cases (the cases named
#      *Sanitizer.*, selected by name from the test binaries' --list); any report fails the suite;
#   3. the whole kernel catalog compiled through the JIT (every instantiation a launcher can
#      produce: KernelCatalog.CompileEveryInstantiation with SWITCHYARD_TEST_FULL_CATALOG=1);
# then prints a summary and exits non-zero if any part failed.
#
#   bash scripts/gpu_suite.sh [BUILD_DIR]      (default build-gpu)
#
# Logs go to $OUT (the GPU machine's output folder) when it is set, else to BUILD_DIR/suite-logs.
# SWITCHYARD_TEST_SANITIZERS=0 skips part 2 (a tool variable of this script).
set -uo pipefail
cd "$(dirname "$0")/.."
# NVLink multicast stays off on shared machines.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
build=${1:-build-gpu}
logs=${OUT:-$build/suite-logs}
mkdir -p "$logs"
start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$logs/configure.log" 2>&1 || { cat "$logs/configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" >"$logs/build.log" 2>&1 || { tail -50 "$logs/build.log"; exit 1; }
export SWITCHYARD_CACHE_DIR=${SWITCHYARD_CACHE_DIR:-$PWD/$build/jit-cache}
nvidia-smi -L 2>/dev/null || echo "nvidia-smi: no GPU listed"
status=0

# 1. The GPU cases.
ctest --test-dir "$build" -L gpu --output-on-failure --timeout 600 2>&1 | tee "$logs/gpu_cases.log"
cases=pass
[ "${PIPESTATUS[0]}" -eq 0 ] || { cases=failed; status=1; }
# A case may skip for want of a second GPU, never for want of the first: that run tested nothing.
if grep -q "found 0 (" "$logs/gpu_cases.log"; then
    cases="failed (no usable GPU: the cases skipped)"
    status=1
fi

# 2. Sanitizers on the small cases, selected by name.
sanitizers=skipped
if [ "${SWITCHYARD_TEST_SANITIZERS:-1}" != 0 ] && command -v compute-sanitizer >/dev/null; then
    sanitizers=clean
    selected=0
    for binary in "$build"/gpu_test_*; do
        [ -x "$binary" ] || continue
        for case_name in $("$binary" --list | grep -E '^[A-Za-z0-9_]*Sanitizer\.'); do
            selected=$((selected + 1))
            for tool in memcheck racecheck; do
                log="$logs/sanitizer-$tool-${binary##*/}-$case_name.log"
                compute-sanitizer --tool "$tool" --error-exitcode 9 "$binary" --case "$case_name" >"$log" 2>&1
                code=$?
                summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
                echo "sanitizer $tool ${binary##*/} $case_name: exit $code; ${summary:-no summary}"
                if [ $code -ne 0 ] || ! grep -qE "(ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards)" "$log"; then
                    sanitizers=failed
                    status=1
                fi
            done
        done
    done
    if [ "$selected" -eq 0 ]; then
        echo "sanitizer: no *Sanitizer.* case found in $build/gpu_test_*"
        sanitizers=failed
        status=1
    fi
elif [ "${SWITCHYARD_TEST_SANITIZERS:-1}" != 0 ]; then
    echo "compute-sanitizer not found: sanitizer runs skipped"
fi

# 3. The whole kernel catalog (77 would mean the case skipped: a failure here).
catalog=pass
SWITCHYARD_TEST_FULL_CATALOG=1 "$build/cpu_test_kernel_families" --case KernelCatalog.CompileEveryInstantiation \
    >"$logs/full_catalog.log" 2>&1 || { catalog=failed; status=1; }
tail -1 "$logs/full_catalog.log" | sed 's/^/full catalog: /'
grep -E "compiled all|FAILED" "$logs/full_catalog.log" | head -20

echo "=== GPU suite summary ($(( $(date +%s) - start )) s, build included) ==="
echo "GPU cases: $cases; sanitizers: $sanitizers; full kernel catalog: $catalog"
grep -E "tests passed|tests failed" "$logs/gpu_cases.log" | tail -1
grep -E "^\s+[0-9]+ - .*\((Failed|Timeout|Not Run)\)" "$logs/gpu_cases.log" | head -40
sed -n '/^Skipped cases/,$p' "$logs/gpu_cases.log" | head -20
exit $status
