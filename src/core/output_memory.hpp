// Where one Buffer's outputs and scratch come from: a stream-ordered memory pool owned by that
// buffer, never shared with another rank.
//
// Why not the device's pool: ranks that share a GPU would share freed blocks, and the driver
// orders a reuse after the free by making the new owner's stream wait for the old owner's. A free
// queued behind a kernel that waits on peers then makes a peer's next op wait for that kernel,
// which waits for the peer: a deadlock only the timeout ends (seen on the GPU machine as one rank
// running its op ~20 s late). Graph-owned allocations have the same problem across graphs of
// co-located ranks, so under stream capture outputs also come from this pool, allocated on a
// side stream outside the capture: a graph's outputs are the tensors its capture returned (keep
// them alive while the graph may replay).
#pragma once

#include <cuda_runtime_api.h>

#include <initializer_list>
#include <memory>
#include <vector>

#include "switchyard/device_tensor.hpp"

namespace switchyard::core {

class OutputMemory {
  public:
    explicit OutputMemory(int device);
    OutputMemory(const OutputMemory&) = delete;
    OutputMemory& operator=(const OutputMemory&) = delete;

    // A tensor for work ordered on `stream` (freed in that order when its last copy goes).
    DeviceTensor allocate(DType dtype, std::initializer_list<int64_t> shape, cudaStream_t stream) const;

    struct Spec {
        DType dtype;
        std::initializer_list<int64_t> shape;
    };
    // Several tensors carved from one allocation (each 256-byte aligned), freed when the last of
    // them goes: one pool call instead of one per tensor. An op's small outputs (its handle's
    // arrays) each cost a pool call of host time when allocated apart.
    std::vector<DeviceTensor> allocate_group(std::initializer_list<Spec> specs, cudaStream_t stream) const;

    // Grows the pool to `bytes` now and keeps them. Growing maps new physical memory, which can
    // wait for work on the whole device: inside an op, with co-located ranks, that wait holds this
    // rank back while its peers' kernels wait for it (seen as a 20 s stall in the HT soak, at the
    // second iteration). Buffer reserves its largest op's outputs at creation instead.
    void reserve(size_t bytes) const;

    struct State;  // the pool and the side stream; tensors share ownership of it

  private:
    std::shared_ptr<State> state_;
};

}  // namespace switchyard::core
