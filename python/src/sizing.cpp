// switchyard.buffer_size_hint: the bytes of the symmetric allocation a BufferConfig asks for on
// each rank, before the Buffer is created (engines plan memory first; DeepEP offers size hints).
//
// The public C++ API has no sizing function yet (issue 25, item 4, adds BufferConfig sizing to
// include/switchyard). Until then this calls the one layout function the Buffer itself uses
// (device::BufferLayout::make, kernels/switchyard/common/buffer_layout.cuh), so no layout math
// is repeated here; when the public function exists this file calls it instead.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <string>

#include "bind.hpp"
#include "switchyard/common/buffer_layout.cuh"
#include "switchyard/config.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::python {
namespace {

using namespace nb::literals;

device::BufferLayout layout_of(const BufferConfig& config, int num_ranks) {
    if (num_ranks < 1) throw InvalidArgument("switchyard: num_ranks must be >= 1, got " + std::to_string(num_ranks));
    device::BufferCapacity capacity{};
    capacity.num_ranks = num_ranks;
    capacity.max_experts = config.max_experts;
    capacity.max_tokens_per_rank = config.max_tokens_per_rank;
    capacity.max_hidden = config.max_hidden;
    capacity.max_topk = config.max_topk;
    capacity.ll_max_tokens_per_rank = config.ll_max_tokens_per_rank;
    capacity.high_throughput = config.enable_high_throughput;
    capacity.low_latency = config.enable_low_latency;
    capacity.ll_zero_copy_combine = config.ll_zero_copy_combine;
    return device::BufferLayout::make(capacity);
}

}  // namespace

void bind_sizing(nb::module_& m) {
    m.def(
        "buffer_size_hint",
        [](const BufferConfig& config, int num_ranks) { return layout_of(config, num_ranks).total_bytes; },
        "config"_a, "num_ranks"_a,
        "Bytes of the symmetric buffer (control workspace + HT and LL regions) each rank allocates for `config` "
        "with `num_ranks` ranks: what Buffer.buffer_bytes reports once created. Outputs of expert-major layouts "
        "come from a separate per-buffer pool.");
    m.def(
        "buffer_size_breakdown",
        [](const BufferConfig& config, int num_ranks) {
            const device::BufferLayout layout = layout_of(config, num_ranks);
            nb::dict out;
            out["workspace"] = layout.workspace.total_bytes;
            out["ht_dispatch"] = layout.ht_dispatch_bytes;
            out["ht_combine"] = layout.ht_combine_bytes;
            out["ll"] = 2 * layout.ll_set_bytes;
            out["ll_zero_copy"] = layout.ll_zero_copy_bytes;
            out["total"] = layout.total_bytes;
            return out;
        },
        "config"_a, "num_ranks"_a, "buffer_size_hint by region (bytes; regions are aligned, the total to 2 MiB).");
}

}  // namespace switchyard::python
