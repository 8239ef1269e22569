// NetPort for the emulated network (declarations and contract: net.cuh).
//
// A request is a 64-byte descriptor in this rank's ring for the port's context, in mapped host
// memory; the rank's engine thread (src/net/emulated_network.cpp) takes descriptors in position
// order, moves the bytes with its copy kernel (net_copy.cuh) and writes signals, counters and flush reports
// into device memory with stream memory operations. A kernel only claims a position (a device
// atomic), fills the slot and publishes it with its tag; it never waits for delivery except where
// the contract makes it wait (waits, flush) and when the ring is full.
#pragma once

#include "switchyard/common/base.cuh"
#include "switchyard/common/diagnostics.cuh"
#include "switchyard/common/ptx.cuh"
#include "switchyard/transport/net.cuh"
#include "switchyard/transport/net_types.cuh"

namespace switchyard::device {

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)

namespace net_emulated {

// Claims the next position of `context`'s ring, waits (bounded) until its slot is free, fills it
// and publishes it. Returns the position, or -1 on timeout / poisoning.
SY_DEVICE int64_t post(const EmulatedNetContext& c, int32_t context, const Diagnostics& diagnostics,
                       uint32_t kind, int32_t peer_node, uint64_t dst_offset, uint64_t src_offset, uint64_t bytes,
                       NetSignal signal, NetCounter counter) {
    uint64_t* heads = c.state + EmulatedNetState::kRingHeads;
    uint64_t* free_hint = c.state + EmulatedNetState::kRingFreeHint + context;
    const uint64_t position =
        atomicAdd(reinterpret_cast<unsigned long long*>(heads + context), 1ull);
    const uint64_t slots = c.ring_slots;
    // The slot last held position - slots; it is free once the engine took that one. The hint (device
    // memory) is a lower bound of the engine's count shared by the kernel's threads, so most
    // requests never read host memory.
    if (ptx::ld_acquire_gpu(free_hint) + slots <= position) {
        const uint64_t* consumed = c.ring_consumed + context;
        uint64_t seen = 0;
        const bool free = wait_until_loaded(
            [&] {
                seen = ptx::ld_acquire_sys(consumed);
                return seen;
            },
            [&](uint64_t value) { return value + slots > position; }, diagnostics, kPhaseNetwork, -1,
            position + 1 - slots,
            NetTimeoutDetails{peer_node, -1, context, kNetWaitRingSpace});
        if (!free) return -1;
        atomicMax(reinterpret_cast<unsigned long long*>(free_hint), static_cast<unsigned long long>(seen));
    }
    NetDescriptor* slot = c.rings + int64_t(context) * slots + (position & (slots - 1));
    slot->dst_offset = dst_offset;
    slot->src_offset = src_offset;
    slot->bytes = bytes;
    slot->signal_value = signal.value;
    slot->kind = kind;
    slot->peer_node = peer_node;
    slot->signal_id = signal.id;
    slot->counter_id = counter.id;
    slot->posted_ns = ptx::globaltimer_ns();
    // Release at system scope: the fields above and the source data this thread wrote (or observed
    // through a barrier) are visible to the engine, and to the copy it starts, before the tag.
    ptx::st_release_sys(&slot->tag, position + 1);
    return int64_t(position);
}

}  // namespace net_emulated

template <>
SY_DEVICE bool NetPort<NetEmulated>::put(int32_t peer_node, uint64_t dst_offset, uint64_t src_offset,
                                         uint64_t bytes, NetSignal signal, NetCounter counter) const {
    if (!request_is_valid(peer_node, dst_offset, src_offset, bytes, signal, counter)) return false;
    return net_emulated::post(context_, index_, diagnostics_, kNetRequestPut, peer_node, dst_offset, src_offset,
                              bytes, signal, counter) >= 0;
}

template <>
SY_DEVICE bool NetPort<NetEmulated>::signal(int32_t peer_node, NetSignal signal) const {
    if (!request_is_valid(peer_node, 0, 0, 0, signal, NetCounter{})) return false;
    return net_emulated::post(context_, index_, diagnostics_, kNetRequestSignal, peer_node, 0, 0, 0, signal,
                              NetCounter{}) >= 0;
}

template <>
SY_DEVICE bool NetPort<NetEmulated>::flush() const {
    if (!request_is_valid(context_.node, 0, 0, 0, NetSignal{}, NetCounter{})) return false;
    // The engine reports a flush once every earlier position of the context has read its source
    // (stronger than the contract: the other threads' earlier puts too); reports are monotone.
    const int64_t position = net_emulated::post(context_, index_, diagnostics_, kNetRequestFlush, context_.node,
                                                0, 0, 0, NetSignal{}, NetCounter{});
    if (position < 0) return false;
    const uint64_t* done = context_.state + EmulatedNetState::kFlushDone + index_;
    return wait_at_least(done, uint64_t(position) + 1, diagnostics_, kPhaseNetwork, -1,
                         NetTimeoutDetails{-1, -1, index_, kNetWaitFlush});
}

template <>
SY_DEVICE uint64_t NetPort<NetEmulated>::read_signal(uint32_t id) const {
    return ptx::ld_acquire_sys(context_.state + net_signal_word(index_, id));
}

template <>
SY_DEVICE uint64_t NetPort<NetEmulated>::read_counter(uint32_t id) const {
    return ptx::ld_acquire_sys(context_.state + net_counter_word(index_, id));
}

template <>
SY_DEVICE bool NetPort<NetEmulated>::wait_signal(uint32_t id, uint64_t target, int32_t peer_node,
                                                 int32_t phase) const {
    const int32_t peer_rank = peer_node >= 0 && peer_node < context_.num_nodes ? rail_peer(peer_node) : -1;
    return wait_at_least(context_.state + net_signal_word(index_, id), target, diagnostics_, phase, peer_rank,
                         NetTimeoutDetails{peer_node, int64_t(id), index_, kNetWaitSignal});
}

template <>
SY_DEVICE bool NetPort<NetEmulated>::wait_counter(uint32_t id, uint64_t target, int32_t phase) const {
    return wait_at_least(context_.state + net_counter_word(index_, id), target, diagnostics_, phase, -1,
                         NetTimeoutDetails{-1, int64_t(id), index_, kNetWaitCounter});
}

#endif

}  // namespace switchyard::device
