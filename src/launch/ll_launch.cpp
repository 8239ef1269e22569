// What the LL launchers share: the buffer part of the kernels' arguments, the grid, the launch,
// and the list of instantiations an op can use (kernel_catalog.hpp).
#include <algorithm>
#include <string>

#include "core/tuning.hpp"
#include "switchyard/errors.hpp"
#include "launch/kernel_catalog.hpp"
#include "launch/ll_launch.hpp"
#include "launch/ll_net_launch.hpp"

namespace switchyard::launch {

device::LlBufferArgs ll_buffer_args(const LaunchContext& context, bool mask_unresponsive,
                                    const device::OpTrace& trace) {
    device::LlBufferArgs buffer{};
    buffer.peer_bases = context.peer_bases;
    buffer.local_base = context.local_base;
    buffer.workspace = context.layout.workspace;
    buffer.signals = device::LlSignalLayout::make(context.num_ranks);
    buffer.rank = context.rank;
    buffer.num_ranks = context.num_ranks;
    buffer.mask_unresponsive = mask_unresponsive ? 1 : 0;
    buffer.diagnostics = context.diagnostics;
    buffer.set_layout = context.layout.ll_set;
    buffer.ll_offset = context.layout.ll_offset;
    buffer.ll_set_bytes = context.layout.ll_set_bytes;
    buffer.trace = trace;
    return buffer;
}

int ll_num_blocks(const LaunchContext& context, int num_sms) {
    const int budget = std::max(1, context.sm_budget);
    return num_sms > 0 ? std::min(num_sms, budget) : budget;
}

void launch_ll_kernel(const jit::KernelSource& source, const LaunchContext& context, int num_blocks,
                      int64_t shared_bytes, const void* args, size_t args_size,
                      const jit::CompileOptions& options) {
    // One cache lookup either way: load on demand, or (another rank of this process on this GPU)
    // only take what was loaded before the op.
    const jit::Kernel* loaded = context.kernels_preloaded_only
                                    ? jit::loaded_kernel(source, context.device, options)
                                    : &jit::get_kernel(source, context.device, options);
    if (!loaded)
        throw InvalidArgument(
            "switchyard: rank " + std::to_string(context.rank) + ": the LL kernel " + source.kernel +
            " is not loaded, and another rank of this process shares GPU " + std::to_string(context.device) +
            ": loading it now would wait for that rank's kernel, which may be waiting for this rank "
            "(DESIGN.md §4, rule 7). Load every LL kernel of the op's shape before the first LL op: "
            "Buffer::ll_load_kernels with the dispatch's arguments, or ll_load_kernels(device, shape) "
            "of planning.hpp");
    const jit::Kernel& kernel = *loaded;
    jit::LaunchConfig config;
    config.grid[0] = static_cast<unsigned>(std::max(1, num_blocks));
    config.block[0] = 32 * tuning::kLlWarps;
    config.shared_bytes = static_cast<unsigned>(shared_bytes);
    config.stream = context.stream;
    config.cooperative = true;
    jit::launch(kernel, config, args, args_size);  // raises the shared-memory limit as needed
}

namespace {

// Adds `source` unless an instantiation of the same name is there already.
void add_once(std::vector<jit::KernelSource>& sources, const jit::KernelSource& source) {
    for (const jit::KernelSource& known : sources)
        if (known.kernel == source.kernel) return;
    sources.push_back(source);
}

}  // namespace

std::vector<jit::KernelSource> ll_op_sources_of(const LlDispatchShape& shape,
                                                const LlDispatchSourceOf& dispatch,
                                                const LlCombineSourceOf& combine) {
    std::vector<jit::KernelSource> sources;
    for (int phases : {device::kLlBothHalves, device::kLlSendHalf, device::kLlRecvHalf}) {
        LlDispatchShape halves = shape;
        halves.phases = phases;
        add_once(sources, dispatch(halves));
        for (bool hierarchical : {false, true})
            add_once(sources, combine({shape.hidden, shape.topk, shape.index_is_int64, phases, hierarchical,
                                       shape.contiguous}));
    }
    return sources;
}

std::vector<jit::KernelSource> ll_op_sources(const LlDispatchShape& shape) {
    return ll_op_sources_of(shape, &ll_dispatch_source, &ll_combine_source);
}

std::vector<jit::KernelSource> ll_catalog_of(
    const CatalogShape& catalog,
    const std::function<std::vector<jit::KernelSource>(const LlDispatchShape&)>& op_sources,
    const std::string& dispatch_family) {
    std::vector<jit::KernelSource> dispatches, combines;
    for (int scale_kind : {device::kScaleNone, device::kScaleFloat32, device::kScaleUe8m0})
        for (bool index_is_int64 : {false, true})
            for (bool contiguous : {false, true})
                for (const jit::KernelSource& source :
                     op_sources({catalog.hidden, catalog.topk, scale_kind, index_is_int64,
                                 device::kLlBothHalves, contiguous}))
                    add_once(source.family == dispatch_family ? dispatches : combines, source);
    dispatches.insert(dispatches.end(), combines.begin(), combines.end());
    return dispatches;
}

std::vector<jit::KernelSource> ll_catalog(const CatalogShape& catalog) {
    std::vector<jit::KernelSource> sources = ll_catalog_of(catalog, &ll_op_sources, "ll_dispatch");
    // Across nodes, on the emulated network (NVRTC; the GIN twins compile with nvcc: ll_net_catalog).
    const std::vector<jit::KernelSource> across_nodes = ll_net_catalog(catalog, false);
    sources.insert(sources.end(), across_nodes.begin(), across_nodes.end());
    return sources;
}

}  // namespace switchyard::launch
