#!/usr/bin/env bash
# The GPU suite in one command: builds Switchyard and runs
#   1. every GPU test case (ctest -L gpu: EP 1, 2, 4 and 8 on one GPU with co-located ranks, and on
#      two GPUs when present), one CTest entry per case;
#   2. compute-sanitizer memcheck and racecheck on the small HT and LL cases (the cases named
#      *Sanitizer.*, selected by name from the test binaries' --list); any report fails the suite;
#   3. the Python package installed from this tree (pip), its GPU tests (2 and 4 processes on one
#      GPU), examples/python/moe_layer.py against the dense layer, and the binding's CPU time per
#      LL call (tests/python/bench_overhead.py); skipped with the reason when torch is missing;
#   0. first, the whole kernel catalog compiled through the JIT on every core (every instantiation a
#      launcher can produce, at the catalog shape and the test cases' shapes:
#      KernelCatalog.CompileEveryInstantiation with SWITCHYARD_TEST_FULL_CATALOG);
# then prints a summary and exits non-zero if any part failed.
#
#   bash scripts/gpu_suite.sh [BUILD_DIR]      (default build-gpu)
#
# Logs go to $OUT (the GPU machine's output folder) when it is set, else to BUILD_DIR/suite-logs.
# SWITCHYARD_TEST_SANITIZERS=0 skips part 2 (SWITCHYARD_SANITIZER_TIMEOUT_S bounds each of its runs,
# default 420); SWITCHYARD_TEST_SHAPES replaces the shapes of part 0;
# SWITCHYARD_TEST_PARTS selects parts (default "catalog cases sanitizers python"; a part left out is
# reported as not run); SWITCHYARD_TEST_CASES / SWITCHYARD_TEST_EXCLUDE: regular expressions of the
# GPU cases to run / leave out (ctest -R / -E) (tool variables of this script).
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

# 0. The whole kernel catalog, compiled on every core first: every instantiation a launcher can
# produce at the catalog shape, and at the test cases' shapes (so the cases below find the JIT cache
# warm instead of compiling one kernel at a time). 77 would mean the case skipped: a failure here.
parts=${SWITCHYARD_TEST_PARTS:-catalog cases sanitizers python}
want() { case " $parts " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
shapes=${SWITCHYARD_TEST_SHAPES:-all:7168x8,ht:256x4,ht:384x4,ht:512x4,ht:128x4,ll:7168x7,ll:2560x9,ll:2048x1,ll:8192x4,ll:4096x2,ll:2048x3,ll:2064x6,ll:4096x5,ll:2048x4,ll:2560x8,ll:2048x2,ll:1024x4}
catalog="not run"
if want catalog; then
    catalog=pass
    SWITCHYARD_TEST_FULL_CATALOG=$shapes "$build/cpu_test_kernel_families" --case KernelCatalog.CompileEveryInstantiation \
        >"$logs/full_catalog.log" 2>&1 || { catalog=failed; status=1; }
    grep -E "compiled all|FAILED" "$logs/full_catalog.log" | head -20
fi

# 1. The GPU cases.
cases="not run"
if want cases; then
    ctest --test-dir "$build" -L gpu ${SWITCHYARD_TEST_CASES:+-R "$SWITCHYARD_TEST_CASES"} \
        ${SWITCHYARD_TEST_EXCLUDE:+-E "$SWITCHYARD_TEST_EXCLUDE"} --output-on-failure --timeout 600 2>&1 |
        tee "$logs/gpu_cases.log"
    ctest_status=${PIPESTATUS[0]}  # read before any other command resets it
    cases=pass
    [ "$ctest_status" -eq 0 ] || { cases=failed; status=1; }
    # A case may skip for want of a second GPU, never for want of the first: that run tested nothing.
    if grep -q "found 0 (" "$logs/gpu_cases.log"; then
        cases="failed (no usable GPU: the cases skipped)"
        status=1
    fi
fi

# 2. Sanitizers on the small cases, selected by name.
sanitizers=skipped
if ! want sanitizers; then
    sanitizers="not run"
elif [ "${SWITCHYARD_TEST_SANITIZERS:-1}" != 0 ] && command -v compute-sanitizer >/dev/null; then
    sanitizers=clean
    selected=0
    for binary in "$build"/gpu_test_*; do
        [ -x "$binary" ] || continue
        for case_name in $("$binary" --list | grep -E '^[A-Za-z0-9_]*Sanitizer\.'); do
            selected=$((selected + 1))
            for tool in memcheck racecheck; do
                log="$logs/sanitizer-$tool-${binary##*/}-$case_name.log"
                # Bounded: under memcheck the case's own timeouts can take minutes to fire (a stalled
                # run was still silent after 240 s, 2026-12-03).
                timeout "${SWITCHYARD_SANITIZER_TIMEOUT_S:-420}" compute-sanitizer --tool "$tool" --error-exitcode 9 \
                    "$binary" --case "$case_name" >"$log" 2>&1
                code=$?
                [ $code -eq 124 ] && echo "killed after ${SWITCHYARD_SANITIZER_TIMEOUT_S:-420} s" >>"$log"
                summary=$(grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log" | tail -1)
                echo "sanitizer $tool ${binary##*/} $case_name: exit $code; ${summary:-no summary}"
                if [ $code -ne 0 ] || ! grep -qE "(ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards)" "$log"; then
                    sanitizers=failed
                    status=1
                    # What the case said before it ended (a timeout names rank, peer and phase): the
                    # log itself may not travel back from the GPU machine.
                    grep -vE "^========= (COMPUTE-SANITIZER|ERROR SUMMARY|RACECHECK SUMMARY)" "$log" | tail -12 |
                        sed 's/^/    | /'
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

# 3. The Python package on the GPU.
python_part="not run"
if want python; then
    if ! python3 -c "import torch" >/dev/null 2>&1; then
        python_part="skipped (torch is not installed)"
    elif ! CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) python3 -m pip install --no-build-isolation . \
        >"$logs/python_install.log" 2>&1; then
        python_part="failed (pip install: $logs/python_install.log)"
        status=1
    else
        python_part=pass
        (cd tests/python && python3 -m pytest -v -p no:cacheprovider test_gpu.py) >"$logs/python_gpu.log" 2>&1 ||
            { python_part=failed; status=1; }
        tail -1 "$logs/python_gpu.log"
        python3 examples/python/moe_layer.py >"$logs/moe_layer.log" 2>&1 || { python_part=failed; status=1; }
        grep -E "^rank" "$logs/moe_layer.log"
        python3 tests/python/bench_overhead.py >"$logs/python_overhead.log" 2>&1 || { python_part=failed; status=1; }
        grep -E "^python" "$logs/python_overhead.log"
    fi
fi

echo "=== GPU suite summary ($(( $(date +%s) - start )) s, build included) ==="
echo "GPU cases: $cases; sanitizers: $sanitizers; full kernel catalog: $catalog; python: $python_part"
if want cases; then
    grep -E "tests passed|tests failed" "$logs/gpu_cases.log" | tail -1
    grep -E "^\s+[0-9]+ - .*\((Failed|Timeout|Not Run)\)" "$logs/gpu_cases.log" | head -40
    sed -n '/^Skipped cases/,$p' "$logs/gpu_cases.log" | head -20
fi
exit $status
