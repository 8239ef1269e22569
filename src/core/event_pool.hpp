// The CUDA events behind the ops' OpEvents (include/switchyard/op_event.hpp), reused: an event
// created and destroyed per op would add host time to every call, and the LL ops are timed on the
// host too. An event goes back to the pool when the last OpEvent copy holding it goes; one still
// held when the pool is gone is destroyed instead.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <vector>

#include "switchyard/op_event.hpp"

namespace switchyard::core {

class EventPool : public std::enable_shared_from_this<EventPool> {
  public:
    EventPool() = default;
    ~EventPool();
    EventPool(const EventPool&) = delete;
    EventPool& operator=(const EventPool&) = delete;

    // An event recorded on `stream` now (the caller has made the stream's device current).
    OpEvent record(cudaStream_t stream);
    // Called by an event's owner when the last OpEvent copy holding it goes.
    void give_back(cudaEvent_t event);

  private:
    std::mutex mutex_;
    std::vector<cudaEvent_t> free_;
};

}  // namespace switchyard::core
