// NetPort for NCCL GIN (declarations and contract: net.cuh).
//
// Compiled only by the JIT's nvcc path against the NCCL headers the library was built with
// (SY_NET_WITH_NCCL; src/jit/nvcc_program.hpp). Each call maps onto one documented device-API call
// on the rail team (ncclTeamRail: the ranks with this rank's local index, one per node, indexed by
// node): put/signal with ncclGin_SignalAdd and ncclGin_CounterInc, flush on this thread, and
// readSignal/readCounter polled through our bounded wait (never NCCL's unbounded waits, never
// a backend's internal structures).
#pragma once

#include <nccl.h>
#include <nccl_device.h>

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/transport/net.cuh"
#include "switchyard/transport/net_types.cuh"

namespace switchyard::device {

static_assert(sizeof(ncclDevComm) <= sizeof(GinNetContext::dev_comm),
              "ncclDevComm of these NCCL headers does not fit GinNetContext: raise kGinDevCommSlotBytes");
static_assert(alignof(ncclDevComm) <= 16, "ncclDevComm needs more alignment than GinNetContext gives it");

namespace net_gin {

// The device communicator the host copied into the context (the kernel parameter, by value).
SY_DEVICE const ncclDevComm& dev_comm(const GinNetContext& context) {
    return *reinterpret_cast<const ncclDevComm*>(context.dev_comm);
}
SY_DEVICE ncclWindow_t window(const GinNetContext& context) {
    return static_cast<ncclWindow_t>(context.window);
}

}  // namespace net_gin

template <>
SY_DEVICE bool NetPort<NetGin>::put(int32_t peer_node, uint64_t dst_offset, uint64_t src_offset, uint64_t bytes,
                                    NetSignal signal, NetCounter counter) const {
    if (!request_is_valid(peer_node, dst_offset, src_offset, bytes, signal, counter)) return false;
    const ncclDevComm& comm = net_gin::dev_comm(context_);
    const ncclGin gin(comm, index_);
    const ncclTeam rail = ncclTeamRail(comm);
    const ncclWindow_t window = net_gin::window(context_);
    // The actions are types in the device API: one call per combination.
    if (signal.present() && counter.present())
        gin.put(rail, peer_node, window, dst_offset, window, src_offset, bytes,
                ncclGin_SignalAdd{signal.id, signal.value}, ncclGin_CounterInc{counter.id});
    else if (signal.present())
        gin.put(rail, peer_node, window, dst_offset, window, src_offset, bytes,
                ncclGin_SignalAdd{signal.id, signal.value});
    else if (counter.present())
        gin.put(rail, peer_node, window, dst_offset, window, src_offset, bytes, ncclGin_None{},
                ncclGin_CounterInc{counter.id});
    else
        gin.put(rail, peer_node, window, dst_offset, window, src_offset, bytes);
    return true;
}

template <>
SY_DEVICE bool NetPort<NetGin>::signal(int32_t peer_node, NetSignal signal) const {
    if (!signal.present() || !request_is_valid(peer_node, 0, 0, 0, signal, NetCounter{})) return false;
    const ncclDevComm& comm = net_gin::dev_comm(context_);
    const ncclGin gin(comm, index_);
    gin.signal(ncclTeamRail(comm), peer_node, ncclGin_SignalAdd{signal.id, signal.value});
    return true;
}

template <>
SY_DEVICE bool NetPort<NetGin>::flush() const {
    const ncclGin gin(net_gin::dev_comm(context_), index_);
    gin.flush(ncclCoopThread{});
    return true;
}

template <>
SY_DEVICE uint64_t NetPort<NetGin>::read_signal(uint32_t id) const {
    const ncclGin gin(net_gin::dev_comm(context_), index_);
    return gin.readSignal(id);
}

template <>
SY_DEVICE uint64_t NetPort<NetGin>::read_counter(uint32_t id) const {
    const ncclGin gin(net_gin::dev_comm(context_), index_);
    return gin.readCounter(id);
}

template <>
SY_DEVICE bool NetPort<NetGin>::wait_signal(uint32_t id, uint64_t target, int32_t peer_node, int32_t phase) const {
    const ncclGin gin(net_gin::dev_comm(context_), index_);
    const int32_t peer_rank = peer_node >= 0 && peer_node < context_.num_nodes ? rail_peer(peer_node) : -1;
    return wait_until_loaded([&] { return gin.readSignal(id); }, [target](uint64_t value) { return value >= target; },
                             diagnostics_, phase, peer_rank, target,
                             NetTimeoutDetails{peer_node, int64_t(id), index_, kNetWaitSignal});
}

template <>
SY_DEVICE bool NetPort<NetGin>::wait_counter(uint32_t id, uint64_t target, int32_t phase) const {
    const ncclGin gin(net_gin::dev_comm(context_), index_);
    return wait_until_loaded([&] { return gin.readCounter(id); }, [target](uint64_t value) { return value >= target; },
                             diagnostics_, phase, -1, target,
                             NetTimeoutDetails{-1, int64_t(id), index_, kNetWaitCounter});
}

}  // namespace switchyard::device
