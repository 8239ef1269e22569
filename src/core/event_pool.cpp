#include "core/event_pool.hpp"

#include "util/cuda_check.hpp"

namespace switchyard {

void OpEvent::wait(cudaStream_t stream) const {
    if (event_) SY_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}

void OpEvent::synchronize() const {
    if (event_) SY_CUDA_CHECK(cudaEventSynchronize(event_));
}

bool OpEvent::done() const {
    if (!event_) return true;
    const cudaError_t status = cudaEventQuery(event_);
    if (status == cudaErrorNotReady) return false;
    SY_CUDA_CHECK(status);
    return true;
}

namespace core {

namespace {
// What an OpEvent's owner holds: the event and where it goes back to.
struct PooledEvent {
    PooledEvent(cudaEvent_t e, std::weak_ptr<EventPool> p) : event(e), pool(std::move(p)) {}
    PooledEvent(const PooledEvent&) = delete;
    PooledEvent& operator=(const PooledEvent&) = delete;
    ~PooledEvent();
    cudaEvent_t event;
    std::weak_ptr<EventPool> pool;
};
}  // namespace

EventPool::~EventPool() {
    for (cudaEvent_t event : free_) cudaEventDestroy(event);
}

OpEvent EventPool::record(cudaStream_t stream) {
    cudaEvent_t event = nullptr;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!free_.empty()) {
            event = free_.back();
            free_.pop_back();
        }
    }
    if (!event) SY_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    auto owner = std::make_shared<PooledEvent>(event, weak_from_this());
    // From here the owner returns the event, also when the record fails.
    SY_CUDA_CHECK(cudaEventRecord(event, stream));
    return OpEvent(event, std::move(owner));
}

void EventPool::give_back(cudaEvent_t event) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_.push_back(event);
}

PooledEvent::~PooledEvent() {
    if (const auto owner = pool.lock())
        owner->give_back(event);
    else
        cudaEventDestroy(event);
}

}  // namespace core
}  // namespace switchyard
