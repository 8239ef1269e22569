#include "stream_gate.hpp"

#include <chrono>
#include <cstdio>
#include <thread>

#include "cuda_check.hpp"

namespace switchyard::bench {

StreamGate::~StreamGate() {
    open();
}

void StreamGate::close(cudaStream_t stream) {
    open_.store(false, std::memory_order_release);
    SWITCHYARD_BENCH_CUDA(cudaLaunchHostFunc(stream, &StreamGate::wait_until_open, this));
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
