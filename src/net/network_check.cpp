// Buffer::check_network: the launcher of the network check kernel (transport/net_check.cuh).
#include <algorithm>
#include <cstring>

#include "core/buffer_impl.hpp"
#include "jit/jit.hpp"
#include "net/gin_kernels.hpp"
#include "net/network.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/transport/net_check.cuh"

namespace switchyard {
namespace {

constexpr unsigned kCheckThreads = 64;  // warp 0 sends, warp 1 receives (kChannels: a warp a channel, then one)

// Puts a round to each peer as the source and receive regions lay them out.
uint64_t puts_per_round(const NetworkCheck& check) {
    return check.pattern == NetworkCheck::Pattern::kChannels
               ? uint64_t(check.channels) * uint64_t(check.puts_per_round)
               : uint64_t(check.puts_per_round);
}

template <class Backend>
device::NetCheckArgs<Backend> make_args(const NetworkCheck& check, const typename Backend::Context& net,
                                        const device::Diagnostics& diagnostics, uint8_t* window, uint64_t data_offset,
                                        net::Network::CheckState& state) {
    device::NetCheckArgs<Backend> args{};
    args.net = net;
    args.diagnostics = diagnostics;
    args.window = window;
    args.results = state.results_device;
    const uint64_t nodes = uint64_t(net.num_nodes);
    args.src_offset = data_offset;
    // Source region [nodes][puts_per_round][put_bytes] (reuse: one slot per node), then the receive region.
    const uint64_t source_slots = check.pattern == NetworkCheck::Pattern::kStream ||
                                          check.pattern == NetworkCheck::Pattern::kChannels
                                      ? puts_per_round(check)
                                      : 1;
    args.dst_offset = data_offset + nodes * source_slots * check.put_bytes;
    args.put_bytes = check.put_bytes;
    std::copy(std::begin(state.signal_base), std::end(state.signal_base), args.signal_base);
    std::copy(std::begin(state.counter_base), std::end(state.counter_base), args.counter_base);
    args.ping_base = state.ping_base;
    args.scenario = static_cast<int32_t>(check.pattern);
    args.rounds = check.rounds;
    args.puts_per_round = check.puts_per_round;
    args.puts_per_signal = check.puts_per_signal;
    args.num_contexts = check.num_contexts;
    args.use_flush = check.use_flush;
    args.check_every_signal = check.check_every_signal;
    args.lane_parallel = check.lane_parallel;
    args.channels = check.channels;
    args.seed = check.seed;
    return args;
}

// What the launch raises, in the same formulas as the kernel: every id of a context grows alike.
void advance_bases(const NetworkCheck& check, net::Network::CheckState& state) {
    const int32_t contexts = check.num_contexts;
    switch (check.pattern) {
        case NetworkCheck::Pattern::kStream: {
            const int32_t groups = device::net_check_groups(check.puts_per_round, check.puts_per_signal);
            for (int32_t c = 0; c < contexts; ++c)
                state.signal_base[c] += uint64_t(check.rounds) * device::net_check_groups_on(groups, contexts, c);
            break;
        }
        case NetworkCheck::Pattern::kReuse:
            for (int32_t c = 0; c < contexts && c < check.rounds; ++c) {
                state.signal_base[c] += 1;
                if (!check.use_flush) state.counter_base[c] += device::net_check_groups_on(check.rounds, contexts, c);
            }
            break;
        case NetworkCheck::Pattern::kPingPong:
            state.ping_base += uint64_t(check.rounds);
            break;
        case NetworkCheck::Pattern::kChannels:
            for (int32_t c = 0; c < contexts; ++c)
                state.signal_base[c] += uint64_t(check.rounds) *
                                        device::net_check_channel_signals_on(check.channels, check.puts_per_round,
                                                                             check.puts_per_signal, contexts, c);
            break;
    }
}

// The bytes of the data regions the check uses.
uint64_t check_bytes(const NetworkCheck& check, int32_t nodes) {
    switch (check.pattern) {
        case NetworkCheck::Pattern::kStream:
        case NetworkCheck::Pattern::kChannels:
            return 2 * uint64_t(nodes) * puts_per_round(check) * check.put_bytes;
        case NetworkCheck::Pattern::kReuse:
            return uint64_t(nodes) * (1 + uint64_t(check.rounds)) * check.put_bytes;
        case NetworkCheck::Pattern::kPingPong:
            return (1 + uint64_t(nodes)) * check.put_bytes;
    }
    return 0;
}

void validate(const NetworkCheck& check, int32_t nodes, int32_t contexts, uint64_t available) {
    auto fail = [](const std::string& what) { throw InvalidArgument("switchyard: check_network: " + what); };
    const int pattern = static_cast<int>(check.pattern);
    if (pattern < 0 || pattern > 3) fail("unknown pattern " + std::to_string(pattern));
    if (check.pattern == NetworkCheck::Pattern::kChannels &&
        (check.channels < 1 || check.channels > device::kNetCheckMaxChannels))
        fail("channels must be in [1, " + std::to_string(device::kNetCheckMaxChannels) + "]");
    if (check.rounds < 1 || check.rounds > 65534) fail("rounds must be in [1, 65534]");
    if (check.puts_per_round < 1) fail("puts_per_round must be >= 1");
    if (check.puts_per_signal < 0) fail("puts_per_signal must be >= 0 (0: one signal per round)");
    if (check.put_bytes % 8 != 0 || (check.put_bytes == 0 && check.pattern != NetworkCheck::Pattern::kPingPong))
        fail("put_bytes must be a positive multiple of 8 (0 only for a ping-pong of bare signals)");
    if (check.num_contexts < 1 || check.num_contexts > contexts)
        fail("num_contexts must be in [1, " + std::to_string(contexts) + "]");
    if (nodes > device::kNetCheckMaxNodes) fail("more than " + std::to_string(device::kNetCheckMaxNodes) + " nodes");
    const uint64_t needed = check_bytes(check, nodes);
    if (needed > available)
        fail("needs " + std::to_string(needed) + " bytes of the buffer's data regions, which hold " +
             std::to_string(available) + "; use fewer or smaller puts");
}

jit::KernelSource check_source(const char* backend) {
    return {std::string("net_check_") + backend, "switchyard/transport/net_check.cuh",
            std::string("switchyard::device::net_check_kernel<switchyard::device::Net") + backend + ">"};
}

}  // namespace

namespace net {
// The check kernel for each backend (the Gin one compiles with nvcc: gin_compile_options()).
std::vector<jit::KernelSource> network_check_catalog() {
    return {check_source("Emulated"), check_source("Gin")};
}
}  // namespace net

NetworkCheckResult Buffer::check_network(const NetworkCheck& check, cudaStream_t stream) {
    Impl& impl = *impl_;
    if (!impl.network)
        throw UnsupportedError("switchyard: check_network: the buffer's ranks are on one node; there is no network");
    net::Network& network = *impl.network;
    const bool gin = network.kind() == net::NetworkKind::kGin;
    const int32_t contexts =
        gin ? network.gin_context().num_contexts : network.emulated_context().num_contexts;
    const uint64_t data_offset = static_cast<uint64_t>(impl.layout.workspace.total_bytes);
    validate(check, network.layout().num_nodes, contexts, impl.memory->bytes() - data_offset);
    impl.errors->throw_if_error(impl.config.timeout_seconds);

    // Every rank loads its kernel before any rank launches: a co-located peer's kernel may wait for
    // this rank's, and loading waits for the device's queued work (DESIGN.md §4, rule 7).
    const jit::KernelSource source = net::network_check_catalog()[gin ? 1 : 0];
    const jit::CompileOptions options = gin ? net::gin_compile_options() : jit::CompileOptions{};
    const jit::Kernel& kernel = jit::get_kernel(source, impl.device, options);  // named: no temporary
    impl.communicator->barrier(impl.timeout());

    net::Network::CheckState& state = network.check_state();
    int64_t initial[device::kNetResultWords] = {};
    initial[device::kNetResultFirstBad] = -1;
    initial[device::kNetResultRttMin] = -1;
    initial[device::kNetResultRttMax] = -1;
    std::memcpy(state.results_host, initial, sizeof(initial));
    const launch::LaunchContext context = impl.context(stream);
    jit::LaunchConfig config;
    config.block[0] = check.pattern == NetworkCheck::Pattern::kChannels ? 32u * unsigned(check.channels + 1)
                                                                          : kCheckThreads;
    config.stream = context.stream;
    const OpEvent done = impl.run_ordered(stream, OpOrder{}, [&] {
        SY_CUDA_CHECK(cudaMemcpyAsync(state.results_device, state.results_host, sizeof(initial),
                                      cudaMemcpyHostToDevice, context.stream));
        if (gin)
            jit::launch(kernel, config,
                        make_args<device::NetGin>(check, network.gin_context(), context.diagnostics,
                                                  impl.memory->local(), data_offset, state));
        else
            jit::launch(kernel, config,
                        make_args<device::NetEmulated>(check, network.emulated_context(), context.diagnostics,
                                                       impl.memory->local(), data_offset, state));
        SY_CUDA_CHECK(cudaMemcpyAsync(state.results_host, state.results_device, sizeof(initial),
                                      cudaMemcpyDeviceToHost, context.stream));
    });
    done.synchronize();
    impl.errors->throw_if_error(impl.config.timeout_seconds);
    advance_bases(check, state);

    const int64_t* words = state.results_host;
    NetworkCheckResult result;
    result.bad_slots = words[device::kNetResultErrors];
    if (words[device::kNetResultFirstBad] >= 0) {
        result.first_bad_node = int32_t(words[device::kNetResultFirstBad] >> 32);
        result.first_bad_put = int32_t(words[device::kNetResultFirstBad] & 0xffffffff);
    }
    result.bytes_sent = uint64_t(words[device::kNetResultBytesSent]);
    result.send_start_ns = words[device::kNetResultSendStart];
    result.receive_end_ns = words[device::kNetResultRecvEnd];
    result.round_trip_min_ns = words[device::kNetResultRttMin];
    result.round_trip_max_ns = words[device::kNetResultRttMax];
    result.send_end_ns = words[device::kNetResultSendEnd];
    result.posts = uint64_t(words[device::kNetResultPosts]);
    if (words[device::kNetResultFailed] != 0)
        throw Error("switchyard: check_network on rank " + std::to_string(impl.communicator->rank()) +
                    ": a request or wait failed without an error record");
    return result;
}

}  // namespace switchyard
