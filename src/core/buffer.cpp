// Buffer: creation (collective), the barrier and layout operations, error surfacing, reset.
#include "switchyard/buffer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <functional>
#include <sstream>

#include "comm/symmetric_memory.hpp"
#include "comm/topology.hpp"
#include "util/cuda_check.hpp"
#include "core/buffer_sizing.hpp"
#include "core/error_state.hpp"
#include "util/mapped_host.hpp"
#include "core/stream_pool.hpp"
#include "core/tuning.hpp"
#include "core/validation.hpp"
#include "jit/driver_api.hpp"
#include "core/buffer_impl.hpp"
#include "launch/ht_launch.hpp"
#include "launch/launch_context.hpp"
#include "net/network_setup.hpp"
#include "switchyard/ll/dispatch.cuh"
#include "switchyard/ll/net_dispatch_send.cuh"

namespace switchyard {
namespace {

// Names the first field in which two ranks' configurations differ.
void check_configs_agree(const std::vector<BufferConfig>& configs) {
    const BufferConfig& first = configs[0];
    struct Field {
        const char* name;
        std::function<std::string(const BufferConfig&)> value;
    };
    const Field fields[] = {
        {"max_tokens_per_rank", [](const BufferConfig& c) { return std::to_string(c.max_tokens_per_rank); }},
        {"max_hidden", [](const BufferConfig& c) { return std::to_string(c.max_hidden); }},
        {"max_topk", [](const BufferConfig& c) { return std::to_string(c.max_topk); }},
        {"max_experts", [](const BufferConfig& c) { return std::to_string(c.max_experts); }},
        {"enable_high_throughput",
         [](const BufferConfig& c) { return std::to_string(c.enable_high_throughput); }},
        {"enable_low_latency", [](const BufferConfig& c) { return std::to_string(c.enable_low_latency); }},
        {"ll_max_tokens_per_rank",
         [](const BufferConfig& c) { return std::to_string(c.ll_max_tokens_per_rank); }},
        {"timeout_seconds", [](const BufferConfig& c) { return std::to_string(c.timeout_seconds); }},
        {"emulated_nodes", [](const BufferConfig& c) { return std::to_string(c.emulated_nodes); }},
        {"num_sms", [](const BufferConfig& c) { return std::to_string(c.num_sms); }},
        {"ll_mask_unresponsive_ranks",
         [](const BufferConfig& c) { return std::to_string(c.ll_mask_unresponsive_ranks); }},
        {"ht_mask_unresponsive_ranks",
         [](const BufferConfig& c) { return std::to_string(c.ht_mask_unresponsive_ranks); }},
        {"ll_zero_copy_combine",
         [](const BufferConfig& c) { return std::to_string(c.ll_zero_copy_combine); }},
        {"network_backend",
         [](const BufferConfig& c) { return std::string(network_backend_name(c.network_backend)); }},
        {"network_bandwidth_gbps",
         [](const BufferConfig& c) { return std::to_string(c.network_bandwidth_gbps); }},
        {"network_latency_us", [](const BufferConfig& c) { return std::to_string(c.network_latency_us); }},
        {"network_adversarial", [](const BufferConfig& c) { return std::to_string(c.network_adversarial); }},
        {"network_withhold_rank",
         [](const BufferConfig& c) { return std::to_string(c.network_withhold_rank); }},
    };
    for (size_t rank = 1; rank < configs.size(); ++rank) {
        for (const Field& field : fields) {
            const std::string a = field.value(first), b = field.value(configs[rank]);
            if (a != b)
                throw InvalidArgument(
                    std::string("switchyard: buffer configurations differ between ranks: ") + field.name +
                    " is " + a + " on rank 0 but " + b + " on rank " + std::to_string(rank) +
                    "; every rank must create its Buffer with the same "
                    "BufferConfig");
        }
    }
}

// Whether `peer` is a thread of this process on this rank's GPU (this rank included).
bool thread_on_my_gpu(const Topology& topology, int peer) {
    return topology.same_process(peer) && topology.same_gpu(peer);
}

// Ranks of this process on this rank's GPU, this rank included.
int ranks_of_process_on_my_gpu(const Topology& topology) {
    int count = 0;
    for (int peer = 0; peer < topology.num_ranks; ++peer) count += thread_on_my_gpu(topology, peer);
    return count;
}

// Ranks that share a GPU inside one process each drive their own streams. CUDA multiplexes all
// streams of a context onto CUDA_DEVICE_MAX_CONNECTIONS hardware queues (8 by default); when
// there are more streams than queues, one rank's spinning kernel can hold back the kernel or copy
// of another rank queued behind it, and we measured broken ordering and stalls at 8 ranks per
// GPU (DESIGN.md §4, rule 1). Refuse that setup with an actionable message.
// With the emulated network each rank also drives its engine's stream.
void check_hardware_queues(const Topology& topology, bool emulated_network) {
    const int co_located = ranks_of_process_on_my_gpu(topology);
    if (co_located <= 1) return;
    const int needed = std::min(32, (emulated_network ? 3 : 2) * co_located + 2);
    const char* value = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
    const int configured = value ? std::atoi(value) : 8;
    if (configured < needed)
        throw UnsupportedError("switchyard: " + std::to_string(co_located) + " ranks share GPU " +
                               topology.placements[topology.rank].gpu_bus_id +
                               " in this process, but CUDA_DEVICE_MAX_CONNECTIONS is " +
                               (value ? std::string(value) : "unset (8)") + "; set it to at least " +
                               std::to_string(needed) +
                               " (32 is safe) in the environment before CUDA is "
                               "initialised, so every rank's streams get their own hardware queue");
}

// A Buffer needs a usable GPU `device`: without a driver or a GPU, say so (the runtime alone would
// report "CUDA driver version is insufficient" for a missing driver).
void require_gpu(int device) {
    try {
        jit::driver();  // UnsupportedError without a driver or a GPU, CudaError for a broken driver
    } catch (const UnsupportedError& error) {
        std::string why = error.what();
        const std::string prefix = "switchyard jit: ";
        if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
        while (!why.empty() && why.back() == '.') why.pop_back();
        throw UnsupportedError("switchyard: no GPU: a Buffer needs a CUDA GPU and none is usable here (" +
                               why +
                               "). The CPU reference (switchyard/reference.hpp) and the planning functions "
                               "(switchyard/planning.hpp) work without one");
    }
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status == cudaErrorInsufficientDriver) {
        (void)cudaGetLastError();
        int driver_version = 0, runtime_version = 0;
        cudaDriverGetVersion(&driver_version);
        cudaRuntimeGetVersion(&runtime_version);
        throw UnsupportedError(
            "switchyard: the CUDA driver supports CUDA " + std::to_string(driver_version / 1000) + "." +
            std::to_string(driver_version % 1000 / 10) + " but this library was built with the CUDA " +
            std::to_string(runtime_version / 1000) + "." + std::to_string(runtime_version % 1000 / 10) +
            " runtime: update the driver");
    }
    if (status == cudaErrorNoDevice || (status == cudaSuccess && count == 0)) {
        (void)cudaGetLastError();
        throw UnsupportedError(
            "switchyard: no GPU: a Buffer needs a CUDA GPU and the CUDA runtime sees none "
            "(check CUDA_VISIBLE_DEVICES)");
    }
    util::cuda_check(status, "cudaGetDeviceCount");
    if (device < 0 || device >= count)
        throw InvalidArgument("switchyard: device " + std::to_string(device) + " is outside the " +
                              std::to_string(count) + " visible GPU(s) [0, " + std::to_string(count) + ")");
}

// What the communicator knows of a peer's process, for error messages (core::PeerNote).
std::string peer_process_note(const Communicator& communicator, int peer) {
    if (peer < 0 || peer >= communicator.size() || communicator.peer_status(peer) != PeerStatus::kGone)
        return {};
    const std::string process = communicator.describe_process(peer);
    return "rank " + std::to_string(peer) + "'s process" + (process.empty() ? "" : " (" + process + ")") +
           " is gone: it exited or was killed (rebuild over the survivors: buffer.hpp, \"When a peer dies\")";
}

// A peer thread of this process on this GPU that never started the awaited kernel may be waiting
// to load a kernel, which waits for this rank's kernel in turn (DESIGN.md §4, rule 7).
std::string colocated_thread_note(const Topology& topology, int peer) {
    if (peer < 0 || peer >= topology.num_ranks || peer == topology.rank) return {};
    if (!thread_on_my_gpu(topology, peer)) return {};
    return "rank " + std::to_string(peer) +
           " is a thread of this process on this GPU: if it was loading a kernel (its first op of a shape "
           "without ll_load_kernels / ht_load_kernels first), the load waited for this rank's kernel: load "
           "every kernel before the first op (buffer.hpp)";
}

}  // namespace

Buffer::Buffer(std::shared_ptr<Communicator> communicator, int device, const BufferConfig& config)
    : impl_(std::make_unique<Impl>()) {
    if (!communicator) throw InvalidArgument("switchyard: Buffer needs a communicator");
    core::validate_config(config);
    require_gpu(device);
    const DeviceScope scope(device);
    Impl& impl = *impl_;
    impl.communicator = std::move(communicator);
    impl.device = device;
    impl.config = upgraded(config);  // an older caller's struct: the newer fields at their defaults
    net::validate_network_config(impl.config, impl.communicator->size());

    check_configs_agree(impl.communicator->all_gather_value(impl.config, impl.timeout()));
    impl.topology = comm::detect_topology(*impl.communicator, device, config.emulated_nodes, impl.timeout());
    if (impl.config.ht_mask_unresponsive_ranks && impl.topology.num_nodes > 1)
        throw UnsupportedError(
            "switchyard: BufferConfig::ht_mask_unresponsive_ranks masks ranks of one node; this "
            "buffer spans " +
            std::to_string(impl.topology.num_nodes) +
            " nodes (the hierarchical HT path has no masking; LL masking works across nodes)");
    // Across nodes: which network, and for GIN every rank's capability agreed before anyone waits.
    net::NetworkPlan network_plan =
        net::plan_network(*impl.communicator, impl.topology, impl.config, device, impl.timeout());
    check_hardware_queues(impl.topology, network_plan.kind == net::NetworkKind::kEmulated);

    // Sized by the functions the planning API uses too (switchyard/planning.hpp).
    impl.layout = device::BufferLayout::make(
        core::buffer_capacity(impl.config, impl.communicator->size(), impl.topology.num_nodes));

    impl.errors = std::make_unique<core::ErrorState>();
    impl.errors->set_peer_note([&impl](const core::PeerNoteQuery& query) {
        std::string note = peer_process_note(*impl.communicator, query.peer);
        if (note.empty() && query.never_started) note = colocated_thread_note(impl.topology, query.peer);
        if (query.over_network && impl.network) {
            const std::string traffic = net::traffic_note(impl.network->stats(), query.peer);
            if (!traffic.empty()) note += (note.empty() ? "" : "; ") + traffic;
            const std::string pending = impl.network->pending_note();
            if (!pending.empty()) note += (note.empty() ? "" : "; ") + pending;
        }
        return note;
    });
    impl.outputs = std::make_unique<core::OutputMemory>(device);
    impl.outputs->reserve(core::output_pool_reserve_bytes(impl.config, impl.communicator->size()));
    {
        // Worst case of the layout kernel's [chunks][E + R] tagged totals (T_max tokens at the
        // largest top-k) and its epoch word (zero at creation and after reset()).
        device::RoutingScratch& scratch = impl.routing_scratch;
        // (Across nodes the routing kernel counts per node too: one more column per node.)
        scratch =
            core::routing_scratch_extent(impl.config, impl.communicator->size(), impl.topology.num_nodes);
        SY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&scratch.words), scratch.bytes()));
        SY_CUDA_CHECK(cudaMemset(scratch.words, 0, scratch.bytes()));
    }
    impl.memory = net::allocate_windows(network_plan, *impl.communicator, impl.topology, device,
                                        static_cast<size_t>(impl.layout.total_bytes), impl.timeout());
    impl.tracer = std::make_unique<core::OpTracer>(impl.layout.workspace.counters(impl.memory->local()),
                                                   impl.communicator->rank());
    impl.comm_stream = core::acquire_stream(device);  // reused: see stream_pool.hpp
    SY_CUDA_CHECK(cudaEventCreateWithFlags(&impl.caller_ready, cudaEventDisableTiming));

    int num_sms = 0;
    SY_CUDA_CHECK(cudaDeviceGetAttribute(&num_sms, cudaDevAttrMultiProcessorCount, device));
    impl.sm_budget = tuning::rank_sm_budget(num_sms, impl.topology.ranks_on_my_gpu,
                                            network_plan.kind == net::NetworkKind::kEmulated);
    impl.gpu_alone = impl.topology.ranks_on_my_gpu == 1;
    impl.kernels_preloaded_only = ranks_of_process_on_my_gpu(impl.topology) > 1;
    impl.device_sms = num_sms;
    if (config.enable_low_latency) {
        // The LL dispatch keeps a bit mask of the op's tokens per expert and per rank in shared
        // memory: refuse a capacity whose largest op could not launch, before any op runs.
        const int64_t shared_bytes =
            impl.topology.num_nodes > 1
                ? device::ll_net_dispatch_shared_bytes(impl.communicator->size(), impl.topology.num_nodes,
                                                       config.max_experts, config.ll_max_tokens_per_rank)
                : device::ll_dispatch_shared_bytes(impl.communicator->size(), config.max_experts,
                                                   config.ll_max_tokens_per_rank);
        int shared_limit = 0;
        SY_CUDA_CHECK(cudaDeviceGetAttribute(&shared_limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
        if (shared_bytes > shared_limit)
            throw InvalidArgument("switchyard: max_experts (" + std::to_string(config.max_experts) +
                                  ") x ll_max_tokens_per_rank (" +
                                  std::to_string(config.ll_max_tokens_per_rank) + ") need " +
                                  std::to_string(shared_bytes) +
                                  " bytes of LL routing masks in shared memory, more than the device's " +
                                  std::to_string(shared_limit) + "; lower one of them");
    }
    {
        const auto counts = util::allocate_mapped_host<int32_t>(
            3 + static_cast<size_t>(impl.layout.workspace.max_local_experts));
        impl.host_counts = counts.host;
        impl.host_counts_device = counts.device;
    }

    if (impl.topology.ranks_on_my_gpu > 1) {
        // Co-located ranks: load the fixed kernels now, not at a first use while a peer's kernel
        // may be waiting for this rank (launch_context.hpp, "Preloading").
        launch::preload_barrier(device, impl.topology.num_nodes > 1);
        launch::preload_routing(device);
        if (impl.topology.num_nodes > 1) launch::preload_routing(device, true);  // the HT dispatch's
    }

    impl.network = net::create_network(
        network_plan, *impl.communicator, impl.topology, *impl.memory, device, impl.config,
        {impl.errors->host_record(), impl.layout.workspace.poison(impl.memory->local())}, impl.timeout());

    // No rank may signal into a peer's workspace before that peer has zeroed it.
    impl.communicator->barrier(impl.timeout());
}

Buffer::~Buffer() {
    if (!impl_) return;
    Impl& impl = *impl_;
    int previous_device = impl.device;
    cudaGetDevice(&previous_device);
    cudaSetDevice(impl.device);
    if (impl.comm_stream) cudaStreamSynchronize(impl.comm_stream);
    if (impl.config.launch_on_caller_stream && impl.latest_done.valid())
        cudaEventSynchronize(impl.latest_done.get());
    // The network delivers what the last ops asked of it, then writes into no peer any more.
    if (impl.network) {
        if (!impl.errors->has_error()) impl.network->drain(impl.timeout());
        impl.network->shutdown();
    }
    // Peers may still write into this memory until they are done with their last operation: wait
    // for them, but never hang in a destructor (a dead peer must not block teardown).
    try {
        impl.communicator->barrier(impl.recovery_timeout());
    } catch (const std::exception&) {
    }
    impl.memory.reset();
    impl.network.reset();  // after the buffers: a GIN window is NCCL's memory
    if (impl.host_counts) cudaFreeHost(impl.host_counts);
    if (impl.routing_scratch.words) cudaFree(impl.routing_scratch.words);
    if (impl.caller_ready) cudaEventDestroy(impl.caller_ready);
    if (impl.comm_stream) core::release_stream(impl.device, impl.comm_stream);
    cudaSetDevice(previous_device);
}

int Buffer::rank() const {
    return impl_->communicator->rank();
}
int Buffer::num_ranks() const {
    return impl_->communicator->size();
}
int Buffer::device() const {
    return impl_->device;
}
const BufferConfig& Buffer::config() const {
    return impl_->config;
}
const Topology& Buffer::topology() const {
    return impl_->topology;
}
Communicator& Buffer::communicator() const {
    return *impl_->communicator;
}
size_t Buffer::buffer_bytes() const {
    return impl_->memory->bytes();
}
cudaStream_t Buffer::comm_stream() const {
    return impl_->comm_stream;
}
int Buffer::sm_budget() const {
    return impl_->sm_budget;
}
uint8_t* Buffer::local_memory() const {
    return impl_->memory->local();
}
uint8_t* Buffer::peer_memory(int rank) const {
    return impl_->memory->peer(rank);
}
size_t Buffer::data_offset() const {
    return static_cast<size_t>(impl_->layout.workspace.total_bytes);
}

void Buffer::barrier(cudaStream_t stream) {
    impl_->run_ordered(stream, OpOrder{}, [&] { launch::launch_barrier(impl_->context(stream)); });
}

void Buffer::get_dispatch_layout(const TensorView& topk_idx, int num_experts, const DispatchLayoutViews& out,
                                 cudaStream_t stream) {
    Impl& impl = *impl_;
    const auto validation = core::make_validation_context(impl.config, num_ranks(), Device::cuda(impl.device),
                                                          impl.config.max_tokens_per_rank);
    core::validate_num_experts(num_experts, validation);
    if (!topk_idx.defined() || topk_idx.ndim != 2 ||
        (topk_idx.dtype != DType::kInt32 && topk_idx.dtype != DType::kInt64))
        throw InvalidArgument("switchyard: topk_idx must be a 2-D int32/int64 tensor, got " +
                              topk_idx.describe());
    // The ids are read and range-checked by the kernel only: host memory is refused here.
    core::require_device_resident(topk_idx, "topk_idx", impl.device);
    if (topk_idx.shape[1] < 1 || topk_idx.shape[1] > std::min(32, impl.config.max_topk))
        throw InvalidArgument("switchyard: top-k must be in [1, max_topk], got " + topk_idx.describe());
    if (topk_idx.shape[1] > 1 && topk_idx.strides[1] != 1)
        throw InvalidArgument("switchyard: topk_idx must have unit stride in its last dimension");
    const int64_t tokens = topk_idx.shape[0], topk = topk_idx.shape[1];
    auto require = [&](const TensorView& view, const char* name, DType dtype, int64_t rows, int64_t cols,
                       bool optional) {
        if (!view.defined()) {
            if (optional) return;
            throw InvalidArgument(std::string("switchyard: dispatch layout output ") + name + " is required");
        }
        const bool shape_ok = cols < 0 ? (view.ndim == 1 && view.shape[0] == rows)
                                       : (view.ndim == 2 && view.shape[0] == rows && view.shape[1] == cols &&
                                          view.is_contiguous());
        if (!shape_ok || view.dtype != dtype || !(view.device == Device::cuda(impl.device)))
            throw InvalidArgument(std::string("switchyard: dispatch layout output ") + name +
                                  " must be a contiguous " + dtype_name(dtype) + " tensor of " +
                                  (cols < 0
                                       ? "[" + std::to_string(rows) + "]"
                                       : "[" + std::to_string(rows) + ", " + std::to_string(cols) + "]") +
                                  " on cuda:" + std::to_string(impl.device) + ", got " + view.describe());
    };
    require(out.num_tokens_per_rank, "num_tokens_per_rank", DType::kInt32, num_ranks(), -1, false);
    require(out.num_tokens_per_expert, "num_tokens_per_expert", DType::kInt32, num_experts, -1, false);
    require(out.token_rank_slot, "token_rank_slot", DType::kInt32, tokens, num_ranks(), false);
    if (out.token_in_rank.defined() && out.token_in_rank.dtype == DType::kBool)
        require(out.token_in_rank, "token_in_rank", DType::kBool, tokens, num_ranks(), true);
    else
        require(out.token_in_rank, "token_in_rank", DType::kUInt8, tokens, num_ranks(), true);
    require(out.token_expert_pos, "token_expert_pos", DType::kInt32, tokens, topk, true);

    device::RoutingArgs args{};
    args.topk_idx = topk_idx.ptr();
    args.topk_row_stride = topk_idx.strides[0];
    args.num_tokens = static_cast<int32_t>(tokens);
    args.topk = static_cast<int32_t>(topk);
    args.num_experts = num_experts;
    args.num_ranks = num_ranks();
    args.num_tokens_per_rank = out.num_tokens_per_rank.ptr_as<int32_t>();
    args.num_tokens_per_expert = out.num_tokens_per_expert.ptr_as<int32_t>();
    args.token_in_rank = out.token_in_rank.defined() ? out.token_in_rank.ptr_as<uint8_t>() : nullptr;
    args.token_rank_slot = out.token_rank_slot.ptr_as<int32_t>();
    args.token_expert_pos = out.token_expert_pos.defined() ? out.token_expert_pos.ptr_as<int32_t>() : nullptr;
    impl.run_ordered(stream, OpOrder{}, [&] {
        launch::launch_routing(impl.context(stream), args, topk_idx.dtype == DType::kInt64);
    });
}

void Buffer::check_errors() const {
    impl_->errors->throw_if_error(impl_->config.timeout_seconds);
}

void Buffer::synchronize() {
    const DeviceScope scope(impl_->device);
    impl_->drain_with_network();
    check_errors();
}

void Buffer::set_op_tracing(bool on) {
    impl_->tracer->set_enabled(on);
}

OpTimeline Buffer::op_timeline(OpTimelineKind kind) {
    return impl_->tracer->take_latest(kind);
}

NetworkStats Buffer::network_stats() const {
    if (impl_->network) return impl_->network->stats();
    NetworkStats stats;
    stats.ranks_per_node = impl_->communicator->size();
    return stats;
}

void Buffer::reset() {
    Impl& impl = *impl_;
    const DeviceScope scope(impl.device);
    impl.drain();
    // A rank whose ops ended cleanly first lets its network deliver what they asked of it (bounded):
    // a peer still waiting in the same op is not cut off by this rank's reset (a peer that failed
    // resets too, but a healthy one would otherwise time out). Then the network stops delivering
    // (nothing of this rank's lands anywhere after this), each rank clears its own network state
    // between the barriers, and it delivers again.
    if (impl.network && !impl.errors->has_error()) impl.network->drain(impl.timeout());
    if (impl.network) impl.network->stop_for_reset(impl.recovery_timeout());
    impl.communicator->barrier(impl.recovery_timeout());
    if (impl.network) impl.network->clear_for_reset();
    SY_CUDA_CHECK(
        cudaMemset(impl.memory->local(), 0, static_cast<size_t>(impl.layout.workspace.total_bytes)));
    // A layout kernel cut short may have left totals tagged with an epoch the epoch word never reached.
    SY_CUDA_CHECK(cudaMemset(impl.routing_scratch.words, 0, impl.routing_scratch.bytes()));
    SY_CUDA_CHECK(cudaDeviceSynchronize());
    impl.errors->clear();
    impl.communicator->barrier(impl.timeout());
    if (impl.network) impl.network->resume_after_reset();
}

}  // namespace switchyard
