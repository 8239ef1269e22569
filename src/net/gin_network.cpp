// NCCL GIN as the scale-out network (see gin_network.hpp). The only host file that includes the
// NCCL headers (CMake gives it their directory when the library is built with them).
#include "net/gin_network.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/stream_pool.hpp"
#include "jit/jit.hpp"
#include "net/gin_kernels.hpp"
#include "util/cuda_check.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/transport/net_gin_window.cuh"

#if defined(SY_HAVE_NCCL_DEVICE_HEADERS)
#include <nccl.h>
#include <nccl_device.h>
static_assert(sizeof(ncclDevComm) <= switchyard::device::kGinDevCommSlotBytes,
              "ncclDevComm of these NCCL headers does not fit GinNetContext: raise kGinDevCommSlotBytes");
static_assert(alignof(ncclDevComm) <= 16, "ncclDevComm needs more alignment than GinNetContext gives it");
static_assert(NCCL_VERSION_CODE == SY_BUILD_NCCL_VERSION_CODE, "the NCCL headers differ from the ones CMake found");
#endif

namespace switchyard::net {
namespace {

#if defined(SY_BUILD_NCCL_VERSION_CODE)
constexpr int32_t kCompiledVersion = SY_BUILD_NCCL_VERSION_CODE;
#else
constexpr int32_t kCompiledVersion = 0;
#endif

device::GinNetContext gin_context_of(const GinResources& gin) {
    device::GinNetContext context{};
    std::memcpy(context.dev_comm, gin.dev_comm, sizeof(context.dev_comm));
    context.window = gin.window;
    context.window_bytes = gin.bytes;
    context.num_contexts = gin.num_contexts;
    context.rank = gin.rank;
    context.node = gin.layout.node;
    context.num_nodes = gin.layout.num_nodes;
    context.local_index = gin.layout.local_index;
    context.ranks_per_node = gin.layout.ranks_per_node;
    return context;
}

void set_detail(GinCapability& capability, const std::string& text) {
    if (capability.detail[0] != '\0') return;  // the first problem
    std::strncpy(capability.detail, text.c_str(), sizeof(capability.detail) - 1);
}

std::string missing_text(uint32_t missing) {
    std::vector<std::string> parts;
    if (missing & kGinNotBuilt)
        parts.push_back("the library was built without the NCCL device headers (nccl_device.h; configure with "
                        "SWITCHYARD_NCCL_INCLUDE_DIR)");
    if (missing & kGinNoLibrary) parts.push_back("NCCL could not be loaded");
    if (missing & kGinTooOld)
        parts.push_back("GIN needs NCCL " + nccl::version_text(kGinMinimumVersion) +
                        " or newer (signals by id, counters, flush)");
    if (missing & kGinVersionMismatch)
        parts.push_back("the NCCL running differs from the headers the library was built with (GIN kernels and "
                        "ncclDevComm are specific to one NCCL version: run the NCCL the library was built with, "
                        "or rebuild against the one you run)");
    if (missing & kGinNoEntryPoints)
        parts.push_back("the NCCL running lacks the device API (ncclDevCommCreate, ncclCommWindowRegister, "
                        "ncclMemAlloc)");
    if (missing & kGinNoKernels) parts.push_back("the GIN kernels could not be compiled with nvcc or loaded");
    if (missing & kGinWindowFailed)
        parts.push_back("the buffer could not be allocated with ncclMemAlloc or registered as a window");
    if (missing & kGinDevCommFailed)
        parts.push_back("ncclDevCommCreate with GIN failed (is there a GIN-capable RDMA NIC on every node?)");
    if (missing & kGinTeamMismatch)
        parts.push_back("NCCL's node (LSA team) differs from Switchyard's node: ranks of one node must be one "
                        "NVLink domain, in contiguous blocks");
    std::string out;
    for (size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
    return out;
}

}  // namespace

GinCapability judge_gin(int32_t rank, int32_t compiled_version, int32_t runtime_version,
                        const std::string& library_problem, bool has_entry_points, bool kernels_ok,
                        const std::string& kernel_problem) {
    GinCapability capability;
    capability.rank = rank;
    capability.compiled_version = compiled_version;
    capability.runtime_version = runtime_version;
    if (compiled_version == 0) capability.missing |= kGinNotBuilt;
    if (!library_problem.empty()) {
        capability.missing |= kGinNoLibrary;
        set_detail(capability, library_problem);
    }
    if (runtime_version != 0 && runtime_version < kGinMinimumVersion) capability.missing |= kGinTooOld;
    if (runtime_version != 0 && compiled_version != 0 && runtime_version != compiled_version)
        capability.missing |= kGinVersionMismatch;
    if (runtime_version != 0 && !has_entry_points) capability.missing |= kGinNoEntryPoints;
    // Kernels are only tried where everything before them holds.
    if (capability.missing == 0 && !kernels_ok) {
        capability.missing |= kGinNoKernels;
        set_detail(capability, kernel_problem);
    }
    return capability;
}

void agree_on_gin(const std::vector<GinCapability>& all, const std::string& step, int32_t num_nodes) {
    std::vector<const GinCapability*> failing;
    for (const GinCapability& capability : all)
        if (capability.missing != 0) failing.push_back(&capability);
    if (failing.empty()) return;
    std::ostringstream message;
    message << "switchyard: the buffer's ranks span " << num_nodes
            << " nodes, which takes NCCL GIN, and GIN is not available (" << step << "; " << failing.size() << " of "
            << all.size() << " rank(s) cannot use it, so every rank raises this error and none waits for another):";
    constexpr size_t kListed = 8;
    for (size_t i = 0; i < failing.size() && i < kListed; ++i) {
        const GinCapability& capability = *failing[i];
        message << "\n  rank " << capability.rank << ": NCCL " << nccl::version_text(capability.compiled_version)
                << " compiled, " << nccl::version_text(capability.runtime_version) << " running: "
                << missing_text(capability.missing);
        const std::string detail(capability.detail, strnlen(capability.detail, sizeof(capability.detail)));
        if (!detail.empty()) message << " (" << detail << ")";
    }
    if (failing.size() > kListed) message << "\n  and " << failing.size() - kListed << " more rank(s)";
    throw UnsupportedError(message.str());
}

GinResources::~GinResources() {
    if (!comm) return;
    const nccl::Library* lib = nullptr;
    try {
        lib = &nccl::library();
    } catch (const std::exception&) {
        return;
    }
    cudaSetDevice(device);
    if (dev_comm_created && lib->dev_comm_destroy) lib->dev_comm_destroy(comm, dev_comm);
    if (window && !window_leaked && lib->comm_window_deregister) lib->comm_window_deregister(comm, window);
    if (memory && !window_leaked && lib->mem_free) lib->mem_free(memory);
}

std::shared_ptr<GinResources> prepare_gin(Communicator& communicator, const Topology& topology,
                                          const comm::NodeLayout& layout, int device,
                                          std::chrono::milliseconds timeout) {
    auto resources = std::make_shared<GinResources>();
    resources->comm = nccl::communicator_handle(communicator);
    resources->device = device;
    resources->rank = topology.rank;
    resources->layout = layout;

    int32_t runtime_version = 0;
    std::string library_problem;
    bool entry_points = false;
    try {
        const nccl::Library& lib = nccl::library();
        runtime_version = lib.version;
        entry_points = lib.mem_alloc && lib.mem_free && lib.comm_window_register && lib.comm_window_deregister &&
                       lib.dev_comm_create && lib.dev_comm_destroy;
    } catch (const std::exception& error) {
        library_problem = error.what();
    }
    bool kernels_ok = false;
    std::string kernel_problem;
    const GinCapability before_kernels =
        judge_gin(topology.rank, kCompiledVersion, runtime_version, library_problem, entry_points, true, "");
    if (before_kernels.missing == 0) {
        try {
            for (const jit::KernelSource& source : gin_setup_catalog()) jit::get_kernel(source, device, gin_compile_options());
            kernels_ok = true;
        } catch (const std::exception& error) {
            kernel_problem = error.what();
            kernel_problem = kernel_problem.substr(0, kernel_problem.find('\n'));
        }
    }
    const GinCapability mine = judge_gin(topology.rank, kCompiledVersion, runtime_version, library_problem,
                                         entry_points, kernels_ok, kernel_problem);
    agree_on_gin(communicator.all_gather_value(mine, timeout), "capability", topology.num_nodes);
    return resources;
}

#if defined(SY_HAVE_NCCL_DEVICE_HEADERS)

std::unique_ptr<comm::SymmetricMemory> allocate_gin_window(GinResources& gin, Communicator& communicator,
                                                           const Topology& topology, int device, size_t bytes,
                                                           std::chrono::milliseconds timeout) {
    const nccl::Library& lib = nccl::library();
    SY_CUDA_CHECK(cudaSetDevice(device));
    auto failure = [&](uint32_t bit, const std::string& what, nccl::Result result) {
        GinCapability capability;
        capability.rank = topology.rank;
        capability.compiled_version = kCompiledVersion;
        capability.runtime_version = lib.version;
        capability.missing = bit;
        const char* last = lib.get_last_error ? lib.get_last_error(gin.comm) : nullptr;
        set_detail(capability, what + ": " + lib.describe_error(result) + (last && *last ? std::string(" ") + last : ""));
        return capability;
    };

    // Step 2: the buffer as a window. Window registration is collective: agree on it first.
    GinCapability registered;
    registered.rank = topology.rank;
    registered.compiled_version = kCompiledVersion;
    registered.runtime_version = lib.version;
    // Whole pages, as windows are registered (NCCL_WIN_REQUIRED_ALIGNMENT).
    bytes = (bytes + NCCL_WIN_REQUIRED_ALIGNMENT - 1) / NCCL_WIN_REQUIRED_ALIGNMENT * NCCL_WIN_REQUIRED_ALIGNMENT;
    gin.bytes = bytes;
    nccl::Result result = lib.mem_alloc(&gin.memory, bytes);
    if (result != nccl::kSuccess) {
        gin.memory = nullptr;
        registered = failure(kGinWindowFailed, "ncclMemAlloc of " + std::to_string(bytes) + " bytes", result);
    } else {
        SY_CUDA_CHECK(cudaMemset(gin.memory, 0, bytes));
        SY_CUDA_CHECK(cudaDeviceSynchronize());
        result = lib.comm_window_register(gin.comm, gin.memory, bytes, &gin.window, NCCL_WIN_COLL_SYMMETRIC);
        if (result != nccl::kSuccess) {
            gin.window = nullptr;
            registered = failure(kGinWindowFailed, "ncclCommWindowRegister", result);
        }
    }
    const auto windows = communicator.all_gather_value(registered, timeout);
    for (const GinCapability& other : windows)
        if (other.missing != 0) gin.window_leaked = gin.window != nullptr;  // a peer never registered
    agree_on_gin(windows, "window registration", topology.num_nodes);

    // Step 3: the device communicator with what transport/net.cuh needs.
    ncclDevCommRequirements requirements;
    std::memset(&requirements, 0, sizeof(requirements));  // 2.28 has no initializer macro
    requirements.ginContextCount = device::kNetMaxContexts;
    requirements.ginSignalCount = device::kNetNumSignals;
    requirements.ginCounterCount = device::kNetNumCounters;
    ncclDevComm dev_comm;
    std::memset(&dev_comm, 0, sizeof(dev_comm));
    GinCapability created = registered;
    result = lib.dev_comm_create(gin.comm, &requirements, &dev_comm);
    if (result != nccl::kSuccess) {
        created = failure(kGinDevCommFailed, "ncclDevCommCreate", result);
    } else {
        gin.dev_comm_created = true;
        const comm::NodeLayout& layout = gin.layout;
        if (dev_comm.rank != topology.rank || dev_comm.nRanks != topology.num_ranks ||
            dev_comm.lsaSize != layout.ranks_per_node || dev_comm.lsaRank != layout.local_index) {
            created.missing |= kGinTeamMismatch;
            set_detail(created, "NCCL: rank " + std::to_string(dev_comm.rank) + " of " + std::to_string(dev_comm.nRanks) +
                                    ", LSA rank " + std::to_string(dev_comm.lsaRank) + " of " +
                                    std::to_string(dev_comm.lsaSize) + "; Switchyard: local index " +
                                    std::to_string(layout.local_index) + " of " + std::to_string(layout.ranks_per_node));
        }
        if (dev_comm.ginContextCount < 1) {
            created.missing |= kGinDevCommFailed;
            set_detail(created, "ncclDevCommCreate gave no GIN context");
        }
        gin.num_contexts = std::min<int32_t>(dev_comm.ginContextCount, device::kNetMaxContexts);
        std::memcpy(gin.dev_comm, &dev_comm, sizeof(dev_comm));
    }
    agree_on_gin(communicator.all_gather_value(created, timeout), "device communicator", topology.num_nodes);

    // The kernels' peer table: this node's windows as NCCL mapped them (never other nodes').
    device::GinSetupArgs args{};
    args.net = gin_context_of(gin);
    void** pointers = nullptr;
    SY_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&pointers), sizeof(void*) * size_t(gin.layout.ranks_per_node)));
    args.lsa_pointers = pointers;
    const cudaStream_t stream = core::acquire_stream(device);
    jit::LaunchConfig config;
    config.block[0] = 32;
    config.stream = stream;
    jit::launch(jit::get_kernel(gin_setup_catalog()[0], device, gin_compile_options()), config, args);
    std::vector<void*> lsa(size_t(gin.layout.ranks_per_node), nullptr);
    SY_CUDA_CHECK(cudaMemcpyAsync(lsa.data(), pointers, sizeof(void*) * lsa.size(), cudaMemcpyDeviceToHost, stream));
    SY_CUDA_CHECK(cudaStreamSynchronize(stream));
    core::release_stream(device, stream);
    SY_CUDA_CHECK(cudaFree(pointers));
    if (lsa[size_t(gin.layout.local_index)] != gin.memory)
        throw Error("switchyard: rank " + std::to_string(topology.rank) +
                    ": NCCL maps this rank's own window at another address than ncclMemAlloc returned");
    std::vector<uint8_t*> peers(size_t(topology.num_ranks), nullptr);
    for (int32_t local = 0; local < gin.layout.ranks_per_node; ++local)
        peers[size_t(gin.layout.rank_of(gin.layout.node, local))] = static_cast<uint8_t*>(lsa[size_t(local)]);
    return std::make_unique<comm::SymmetricMemory>(topology, device, static_cast<uint8_t*>(gin.memory), bytes,
                                                   std::move(peers));
}

void GinNetwork::clear_for_reset() {
    device::GinSetupArgs args{};
    args.net = gin_context_of(*resources_);
    SY_CUDA_CHECK(cudaSetDevice(device_));
    const cudaStream_t stream = core::acquire_stream(device_);
    jit::LaunchConfig config;
    config.grid[0] = unsigned(resources_->num_contexts);
    config.block[0] = 256;
    config.stream = stream;
    jit::launch(jit::get_kernel(gin_setup_catalog()[1], device_, gin_compile_options()), config, args);
    SY_CUDA_CHECK(cudaStreamSynchronize(stream));
    core::release_stream(device_, stream);
    check_ = CheckState{check_.results_device, check_.results_host};
}

#else

std::unique_ptr<comm::SymmetricMemory> allocate_gin_window(GinResources&, Communicator&, const Topology&, int, size_t,
                                                           std::chrono::milliseconds) {
    throw UnsupportedError("switchyard: this library was built without the NCCL device headers (GIN)");
}

void GinNetwork::clear_for_reset() {
    throw UnsupportedError("switchyard: this library was built without the NCCL device headers (GIN)");
}

#endif

GinNetwork::GinNetwork(const comm::NodeLayout& layout, std::shared_ptr<GinResources> resources, int device)
    : Network(layout, device), resources_(std::move(resources)), device_(device) {}

device::GinNetContext GinNetwork::gin_context() const {
    return gin_context_of(*resources_);
}

NetworkStats GinNetwork::stats() const {
    NetworkStats out;
    out.backend = "gin";
    out.num_nodes = layout_.num_nodes;
    out.ranks_per_node = layout_.ranks_per_node;
    out.node = layout_.node;
    out.local_index = layout_.local_index;
    out.accounted = false;
    return out;
}

}  // namespace switchyard::net
