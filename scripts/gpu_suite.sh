#!/usr/bin/env bash
# Builds Switchyard and runs the GPU test suite (EP 1/2/4/8 on one GPU and, when present, on two)
# and compute-sanitizer on its small cases, then prints a summary. Usage: bash scripts/gpu_suite.sh [build-dir]
# Logs go to $OUT (the GPU machine's output folder) when it is set, else to the build dir.
set -uo pipefail
cd "$(dirname "$0")/.."
# NVLink multicast stays off on shared machines.
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
build=${1:-build-gpu}
logs=${OUT:-$build}
mkdir -p "$logs"
start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$logs/configure.log" 2>&1 || { cat "$logs/configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" >"$logs/build.log" 2>&1 || { tail -50 "$logs/build.log"; exit 1; }
export SWITCHYARD_CACHE_DIR=${SWITCHYARD_CACHE_DIR:-$PWD/$build/jit-cache}
nvidia-smi -L 2>/dev/null || echo "nvidia-smi: no GPU listed"
ctest --test-dir "$build" -L gpu -V --timeout 600 2>&1 | tee "$logs/gpu_suite.log"
status=${PIPESTATUS[0]}
# compute-sanitizer memcheck and racecheck on the small EP2 cases of the HT and LL paths
# (SWITCHYARD_SUITE_SANITIZERS=0 skips them). A report with errors or hazards fails the suite.
sanitizers=skipped
if [ "${SWITCHYARD_SUITE_SANITIZERS:-1}" != 0 ] && command -v compute-sanitizer >/dev/null; then
    sanitizers=clean
    for tool in memcheck racecheck; do
        for test in gpu_test_ht_graph_soak gpu_test_ll; do
            log="$logs/sanitizer-$tool-$test.log"
            compute-sanitizer --tool "$tool" --error-exitcode 9 "$build/$test" Sanitizer >"$log" 2>&1
            code=$?
            summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
            echo "sanitizer $tool $test: exit $code; ${summary:-no summary}"
            if [ $code -ne 0 ] || ! grep -qE "(ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards)" "$log"; then
                sanitizers=failed
                status=1
            fi
        done
    done
elif [ "${SWITCHYARD_SUITE_SANITIZERS:-1}" != 0 ]; then
    echo "compute-sanitizer not found: sanitizer runs skipped"
fi
echo "=== GPU suite summary ($(( $(date +%s) - start )) s, build included; sanitizers: $sanitizers) ==="
grep -E "(EP[0-9]|TimeoutError|co-resident|FAIL|passed, )" "$logs/gpu_suite.log" | sed -E 's/^[0-9]+: //' | head -60
grep -E "tests passed|tests failed|Test +#" "$logs/gpu_suite.log" | tail -20
exit $status
