// The host side of the emulated network's request rings (the device side: net_emulated.cuh's
// post()). One ring per context, `slots` 64-byte descriptors each, in mapped host memory. Writers
// (kernel threads) claim positions with an atomic on a device counter, wait until the slot's
// previous position was taken (consumed + slots > position), fill the slot and publish it by
// writing its tag (position + 1) last, with release semantics. The reader takes positions strictly
// in order: a slot is taken only when its tag matches the position it expects (a stale tag from an
// earlier lap never does), and the count taken is published to the writers with release semantics
// once the descriptors were copied out.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <vector>

#include "switchyard/transport/net_types.cuh"

namespace switchyard::net {

class DescriptorRing {
  public:
    DescriptorRing(device::NetDescriptor* rings, uint64_t* consumed, int32_t contexts, uint32_t slots)
        : rings_(rings), consumed_(consumed), slots_(slots), next_(size_t(contexts), 0) {}

    // Takes up to `limit` published descriptors of `context`, in position order, handing each to
    // take(position, descriptor); then tells the writers. Returns how many it took.
    template <typename Take>
    int take(int32_t context, int limit, Take&& take) {
        uint64_t& next = next_[size_t(context)];
        int taken = 0;
        while (taken < limit) {
            device::NetDescriptor* slot = rings_ + size_t(context) * slots_ + (next & (slots_ - 1));
            if (std::atomic_ref<uint64_t>(slot->tag).load(std::memory_order_acquire) != next + 1) break;
            const device::NetDescriptor request = *slot;  // after the acquire: the fields are complete
            take(next, request);
            ++next;
            ++taken;
        }
        // The writers may now reuse these slots.
        if (taken > 0) std::atomic_ref<uint64_t>(consumed_[context]).store(next, std::memory_order_release);
        return taken;
    }

    // Whether `context` has a published descriptor waiting.
    bool ready(int32_t context) const {
        const uint64_t next = next_[size_t(context)];
        device::NetDescriptor* slot = rings_ + size_t(context) * slots_ + (next & (slots_ - 1));
        return std::atomic_ref<uint64_t>(slot->tag).load(std::memory_order_acquire) == next + 1;
    }

    // For reset(), with no writer running: empty slots and positions from zero.
    void clear() {
        std::memset(static_cast<void*>(rings_), 0, next_.size() * slots_ * sizeof(device::NetDescriptor));
        for (size_t context = 0; context < next_.size(); ++context) {
            consumed_[context] = 0;
            next_[context] = 0;
        }
    }

    int32_t contexts() const { return int32_t(next_.size()); }
    uint64_t next(int32_t context) const { return next_[size_t(context)]; }

  private:
    device::NetDescriptor* rings_;
    uint64_t* consumed_;
    uint32_t slots_;
    std::vector<uint64_t> next_;
};

}  // namespace switchyard::net
