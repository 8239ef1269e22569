#!/usr/bin/env bash
# One GPU-machine session for the flaky multi-rank tests: build, then run the tests that failed
# in the last suite (twice), then profile one HT configuration with nsys if it is installed.
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
build=${1:-build-gpu}
logs=${OUT:-$build}
mkdir -p "$logs"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >"$logs/configure.log" 2>&1 || { cat "$logs/configure.log"; exit 1; }
cmake --build "$build" -j"$(nproc)" >"$logs/build.log" 2>&1 || { tail -50 "$logs/build.log"; exit 1; }
export SWITCHYARD_CACHE_DIR=${SWITCHYARD_CACHE_DIR:-$PWD/$build/jit-cache}
for round in 1 2; do
  for t in gpu_test_barrier_stress gpu_test_ht_graph_soak gpu_test_ll_robustness; do
    s=$(date +%s)
    timeout 240 "$build/$t" >"$logs/$t.$round.log" 2>&1
    echo "round $round $t rc=$? ($(( $(date +%s) - s )) s)"
    grep -E "FAIL|rank [0-9]+:|workspace|    " "$logs/$t.$round.log" | head -80
  done
done
