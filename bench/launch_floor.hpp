// The launch floor (DESIGN.md §9): an empty kernel launched through the JIT, event-timed with the
// stream gated until it is enqueued, so the span is the GPU's cost of one launch, not the host's.
// The LL targets are stated against it (each op ≤ 1.25 × launch floor + bytes / copy rate).
#pragma once

#include "stats.hpp"

namespace switchyard::bench {

// `iters` timed launches on `device` after `warmup` untimed ones.
TimingStats measure_launch_floor(int device, int iters, int warmup);

}  // namespace switchyard::bench
