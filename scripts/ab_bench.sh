#!/usr/bin/env bash
# A/B of two source trees' HT and LL benchmarks in one run on one GPU: builds switchyard-bench of
# each tree, runs `ht` and `ll` of both in interleaved rounds (the order alternates each round, so
# drift of the machine hits both sides alike), writes every results JSON and prints, per record,
# the median over the rounds of each side's median time, the ratio new/old and each side's spread.
#
#   bash scripts/ab_bench.sh [--prepare] OLD_DIR NEW_DIR
#
# --prepare only builds both benchmarks and fills their JIT caches (one short run of each mode), so
# a later run without it spends its time measuring (a device call is limited to 10 minutes).
# The builds and caches live in build-ab/ of this repository (ignored by git, kept between runs).
#
# Tool variables of this script (defaults in brackets):
#   SWITCHYARD_BENCH_AB_ROUNDS      rounds per side and mode [3]
#   SWITCHYARD_BENCH_AB_MODES       the subcommands to compare [ht ll]
#   SWITCHYARD_BENCH_AB_HT_ARGS     arguments of `ht` [--ranks 2 --gpus 1: co-located EP2 on GPU 0]
#   SWITCHYARD_BENCH_AB_LL_ARGS     arguments of `ll` [--ranks 2 --gpus 1]
# Both trees' benchmarks must take these arguments. Results go to $OUT/ab when OUT is set (the GPU
# machine's output folder), else to ./ab-results. Needs python3 for the comparison table.
set -euo pipefail
prepare=0
if [ "${1:-}" = --prepare ]; then
    prepare=1
    shift
fi
if [ $# -ne 2 ] || [ ! -f "$1/CMakeLists.txt" ] || [ ! -f "$2/CMakeLists.txt" ]; then
    echo "usage: bash scripts/ab_bench.sh [--prepare] OLD_DIR NEW_DIR   (two Switchyard source trees)" >&2
    exit 2
fi
command -v python3 >/dev/null || { echo "ab_bench.sh: python3 is needed for the comparison" >&2; exit 2; }
old=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
work=$(cd "$(dirname "$0")/.." && pwd)/build-ab
rounds=${SWITCHYARD_BENCH_AB_ROUNDS:-3}
modes=${SWITCHYARD_BENCH_AB_MODES:-ht ll}
ht_args=${SWITCHYARD_BENCH_AB_HT_ARGS:---ranks 2 --gpus 1}
ll_args=${SWITCHYARD_BENCH_AB_LL_ARGS:---ranks 2 --gpus 1}
results=${OUT:+$OUT/ab}
results=${results:-$PWD/ab-results}
mkdir -p "$results" "$work"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMM_MEM_DISABLE_MULTICAST=1

for side in old new; do
    tree=${!side}
    echo "building $side: $tree"
    cmake -S "$tree" -B "$work/$side" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSWITCHYARD_BUILD_TESTS=OFF \
        >"$results/$side-configure.log" 2>&1 || { tail -30 "$results/$side-configure.log"; exit 1; }
    cmake --build "$work/$side" -j"$(nproc)" --target switchyard-bench >"$results/$side-build.log" 2>&1 ||
        { tail -30 "$results/$side-build.log"; exit 1; }
done

# One run of one side's benchmark, from its tree (so the recorded commit is that tree's), with the
# side's own JIT cache. Extra arguments follow the mode's.
run_one() {
    local side=$1 mode=$2 round=$3 tree=${!1} args
    shift 3
    [ "$mode" = ht ] && args=$ht_args || args=$ll_args
    [ "$mode" = ht ] || [ "$mode" = ll ] || args=""
    local json="$results/$side-$mode-r$round.json" log="$results/$side-$mode-r$round.log"
    echo "round $round: $side $mode $args $*"
    # shellcheck disable=SC2086
    if ! (cd "$tree" && SWITCHYARD_CACHE_DIR="$work/cache-$side" \
            "$work/$side/switchyard-bench" "$mode" $args "$@" --out "$json") >"$log" 2>&1; then
        echo "ab_bench.sh: $side $mode failed (round $round):" >&2
        tail -20 "$log" >&2
        exit 1
    fi
}

if [ "$prepare" = 1 ]; then
    for side in old new; do
        for mode in $modes; do run_one "$side" "$mode" 0 --iters 1 --warmup 1; done
    done
    rm -f "$results"/*-r0.json
    echo "built both benchmarks and filled their JIT caches (logs: $results/*-r0.log)"
    exit 0
fi

for round in $(seq 1 "$rounds"); do
    if [ $((round % 2)) -eq 1 ]; then order="old new"; else order="new old"; fi
    for mode in $modes; do
        for side in $order; do run_one "$side" "$mode" "$round"; done
    done
done

python3 - "$results" $modes <<'PY' | tee "$results/comparison.txt"
import glob, json, os, statistics, sys

results, modes = sys.argv[1], sys.argv[2:]
EXTRAS = ("phase", "direction", "combine_reduction", "hook", "dispatch_dtype", "nodes")


def key(record):
    return (record.get("mode"), record.get("op"), record.get("dtype"), bool(record.get("graph_replay")),
            record.get("ranks"), record.get("gpus"), record.get("tokens_per_rank"), record.get("num_sms"),
            tuple(str(record.get(name, "")) for name in EXTRAS))


def label(k):
    mode, op, dtype, graph, ranks, gpus, tokens, sms, extras = k
    variant = ",".join(v for v in extras[:3] if v and v != "both")
    text = f"{mode} {op} {dtype} EP{ranks}/{gpus}gpu t={tokens}"
    if sms:
        text += f" sms={sms}"
    if graph:
        text += " graph"
    if extras[3] == "True":
        text += " hook"
    if op == "combine" and extras[4]:
        text += f" after-{extras[4]}"
    if extras[5] and extras[5] != "1":
        text += f" nodes={extras[5]}"
    return text + (f" {variant}" if variant else "")


times = {"old": {}, "new": {}}  # side -> key -> [median of each round]
order = []
for side in times:
    for mode in modes:
        for path in sorted(glob.glob(os.path.join(results, f"{side}-{mode}-r*.json"))):
            with open(path) as f:
                for record in json.load(f)["records"]:
                    k = key(record)
                    if k not in order:
                        order.append(k)
                    times[side].setdefault(k, []).append(record["time_us_median"])


def spread(values):
    middle = statistics.median(values)
    return (max(values) - min(values)) / middle if middle else 0.0


print(f"{'record':<58} {'old_us':>10} {'new_us':>10} {'new/old':>8} {'old_spread':>10} {'new_spread':>10}")
ratios = []
for k in order:
    old, new = times["old"].get(k), times["new"].get(k)
    if not old or not new:
        print(f"{label(k):<58} {'(only in ' + ('old' if not new else 'new') + ')':>21}")
        continue
    old_median, new_median = statistics.median(old), statistics.median(new)
    ratio = new_median / old_median if old_median else float("nan")
    if k[0] != "baseline":
        ratios.append(ratio)
    print(f"{label(k):<58} {old_median:>10.2f} {new_median:>10.2f} {ratio:>8.3f} {spread(old):>10.1%} "
          f"{spread(new):>10.1%}")
if ratios:
    geomean = statistics.geometric_mean(ratios)
    print(f"\n{len(ratios)} HT/LL records: new/old geometric mean {geomean:.3f}, "
          f"min {min(ratios):.3f}, max {max(ratios):.3f} (spread = (max - min) / median over the rounds)")
PY
echo "results: $results"
