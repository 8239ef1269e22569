#include "launch_floor.hpp"

#include <vector>

#include "event_timer.hpp"
#include "harness/cuda_raii.hpp"
#include "jit/embedded_headers.hpp"
#include "jit/jit.hpp"
#include "stream_gate.hpp"
#include "switchyard/bench/empty_kernel.cuh"

namespace switchyard::bench {

// bench/kernels/, embedded at build time (CMakeLists.txt).
extern const jit::EmbeddedHeaderSet kBenchKernelHeaders;

TimingStats measure_launch_floor(int device, int iters, int warmup) {
    jit::add_header_set(kBenchKernelHeaders);
    harness::DeviceGuard guard(device);
    const jit::Kernel& kernel = jit::get_kernel(
        {"bench_empty", "switchyard/bench/empty_kernel.cuh", "switchyard::device::empty_kernel"}, device);
    harness::Stream stream(device);
    EventTimer timer(device);
    StreamGate gate;
    const device::EmptyKernelArgs args{0};
    jit::LaunchConfig config;
    config.stream = stream.get();
    std::vector<double> samples;
    for (int i = 0; i < warmup + iters; ++i) {
        gate.close(stream.get());
        timer.start(stream.get());
        jit::launch(kernel, config, &args, sizeof(args));
        timer.stop(stream.get());
        gate.open();
        const double us = timer.elapsed_us();
        if (i >= warmup) samples.push_back(us);
    }
    return summarize(std::move(samples));
}

}  // namespace switchyard::bench
