// A buffer's network set-up (see network_setup.hpp).
#include "net/network_setup.hpp"

#include "comm/nccl_library.hpp"
#include "net/emulated_network.hpp"
#include "net/gin_network.hpp"

namespace switchyard::net {

NetworkPlan plan_network(Communicator& communicator, const Topology& topology, const BufferConfig& config,
                         int device, std::chrono::milliseconds timeout) {
    NetworkPlan plan;
    plan.kind = resolve_network_kind(config, topology, nccl::communicator_handle(communicator) != nullptr,
                                     communicator.describe());
    if (plan.kind == NetworkKind::kNone) return plan;
    plan.layout = comm::node_layout(topology);
    if (plan.kind == NetworkKind::kGin) plan.gin = prepare_gin(communicator, topology, plan.layout, device, timeout);
    return plan;
}

std::unique_ptr<comm::SymmetricMemory> allocate_windows(NetworkPlan& plan, Communicator& communicator,
                                                        const Topology& topology, int device, size_t bytes,
                                                        std::chrono::milliseconds timeout) {
    if (plan.kind == NetworkKind::kGin) return allocate_gin_window(*plan.gin, communicator, topology, device, bytes, timeout);
    return std::make_unique<comm::SymmetricMemory>(communicator, topology, device, bytes, timeout);
}

std::unique_ptr<Network> create_network(NetworkPlan& plan, Communicator& communicator, const Topology& topology,
                                        const comm::SymmetricMemory& windows, int device, const BufferConfig& config,
                                        const NetworkDiagnostics& diagnostics, std::chrono::milliseconds timeout) {
    switch (plan.kind) {
        case NetworkKind::kNone:
            return nullptr;
        case NetworkKind::kEmulated: {
            EmulatedNetwork::Setup setup;
            setup.communicator = &communicator;
            setup.topology = &topology;
            setup.layout = plan.layout;
            setup.windows = &windows;
            setup.device = device;
            setup.config = config;
            setup.host_record = diagnostics.host_record;
            setup.poison = diagnostics.poison;
            setup.timeout = timeout;
            return std::make_unique<EmulatedNetwork>(setup);
        }
        case NetworkKind::kGin:
            return std::make_unique<GinNetwork>(plan.layout, plan.gin, device);
    }
    return nullptr;
}

}  // namespace switchyard::net
