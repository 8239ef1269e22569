#include "stream_gate.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "util/cuda_check.hpp"

namespace switchyard::bench {

StreamGate::~StreamGate() {
    open();
}

void StreamGate::close(cudaStream_t stream) {
    // Under a profiler that serializes launches (ncu), a launch waits for the host function before
    // it: the gate would only ever open by its 60 s timeout. SWITCHYARD_BENCH_NO_GATE=1 skips it
    // (the events then include host time).
    static const bool disabled = [] {
        const char* value = std::getenv("SWITCHYARD_BENCH_NO_GATE");
        return value && value[0] == '1';
    }();
    if (disabled) return;
    open_.store(false, std::memory_order_release);
    SY_CUDA_CHECK(cudaLaunchHostFunc(stream, &StreamGate::wait_until_open, this));
}

void StreamGate::open() {
    open_.store(true, std::memory_order_release);
}

// Runs on CUDA's callback thread. It gives up after a minute (and says so) rather than hold the
// stream forever if the bench thread died before opening it.
void StreamGate::wait_until_open(void* gate) {
    auto* self = static_cast<StreamGate*>(gate);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!self->open_.load(std::memory_order_acquire)) {
        if (std::chrono::steady_clock::now() > deadline) {
            std::fprintf(stderr, "switchyard-bench: a stream gate stayed closed for 60 s; releasing it\n");
            return;
        }
        std::this_thread::yield();
    }
}

}  // namespace switchyard::bench
