#!/usr/bin/env bash
# The test command of README.md: builds Switchyard and runs every test that this machine can run.
#   1. C++: configure, build, and every test case as its own CTest entry (GPU cases skip without a
#      GPU, and CTest's post-test step prints why each skipped case skipped).
#   2. bench/results/ holds one file per (machine, mode), at most 12, and its index is current.
#   3. The packages: `cmake --install` into a scratch prefix, examples/cpp built against it with
#      find_package(switchyard) and run; `pip install .` and the Python tests (GPU ones skip with a
#      printed reason without a GPU).
# Usage: bash scripts/test.sh [build-dir]   (SWITCHYARD_TEST_SKIP_PYTHON=1 skips the pip part)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
export SWITCHYARD_CACHE_DIR="${SWITCHYARD_CACHE_DIR:-$PWD/$build/jit-cache}"
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

cmake -S . -B "$build" -G Ninja "${launcher[@]}"
cmake --build "$build" -j2
ctest --test-dir "$build" --output-on-failure -j2

if command -v python3 >/dev/null; then
    python3 scripts/results_index.py --check
fi

prefix="$PWD/$build/ci-install"
rm -rf "$prefix" "$build/ci-example"
cmake --install "$build" --prefix "$prefix" --component switchyard_development >/dev/null
cmake -S examples/cpp -B "$build/ci-example" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" "${launcher[@]}"
cmake --build "$build/ci-example"
"./$build/ci-example/round_trip"

if [ "${SWITCHYARD_TEST_SKIP_PYTHON:-0}" != 1 ]; then
    python3 -m pip install -q scikit-build-core nanobind pytest numpy
    ((${#launcher[@]})) && export CMAKE_CXX_COMPILER_LAUNCHER=ccache
    python3 -m pip install -q --no-build-isolation .
    # From outside the tree, so the installed package is the one imported.
    (cd tests/python && python3 -m pytest -q -rs -p no:cacheprovider .)
fi
