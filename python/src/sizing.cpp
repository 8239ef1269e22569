// switchyard.buffer_size_hint and buffer_size_breakdown: the memory a BufferConfig takes on each
// rank before the Buffer is created (engines plan memory first; DeepEP offers size hints), from
// the public planning API (include/switchyard/planning.hpp), which the Buffer itself sizes with.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bind.hpp"
#include "switchyard/config.hpp"
#include "switchyard/planning.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::python {

void bind_sizing(nb::module_& m) {
    using namespace nb::literals;
    m.def(
        "buffer_size_hint",
        [](const BufferConfig& config, int num_ranks) { return buffer_sizes(config, num_ranks).symmetric; },
        "config"_a, "num_ranks"_a,
        "Bytes of the symmetric buffer (control workspace + HT and LL regions) each rank allocates for `config` "
        "with `num_ranks` ranks: what Buffer.buffer_bytes reports once created. Outputs of expert-major layouts "
        "come from a separate per-buffer pool.");
    m.def(
        "buffer_size_breakdown",
        [](const BufferConfig& config, int num_ranks) {
            const BufferSizes sizes = buffer_sizes(config, num_ranks);
            nb::dict out;
            out["workspace"] = sizes.workspace;
            out["ht_dispatch"] = sizes.ht_dispatch;
            out["ht_combine"] = sizes.ht_combine;
            out["ll"] = sizes.low_latency;
            out["ll_zero_copy"] = sizes.ll_zero_copy;
            out["total"] = sizes.symmetric;
            out["output_pool_reserve"] = sizes.output_pool_reserve;
            out["routing_scratch"] = sizes.routing_scratch;
            out["device_total"] = sizes.total;
            return out;
        },
        "config"_a, "num_ranks"_a, "buffer_size_hint by region (bytes; regions are aligned, the total to 2 MiB), and beside the symmetric "
        "buffer the output pool reserved at creation and the routing scratch (device_total: all of it).");
}

}  // namespace switchyard::python
