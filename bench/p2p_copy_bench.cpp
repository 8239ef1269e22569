#include "p2p_copy_bench.hpp"

#include <algorithm>
#include <string>

#include "util/cuda_check.hpp"
#include "harness/cuda_raii.hpp"
#include "event_timer.hpp"
#include "l2_flush.hpp"
#include "record.hpp"
#include "stream_alignment.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::bench {
namespace {

void enable_one_way(int from, int to) {
    int can_access = 0;
    SY_CUDA_CHECK(cudaDeviceCanAccessPeer(&can_access, from, to));
    if (!can_access) {
        throw UnsupportedError("GPU " + std::to_string(from) + " cannot access GPU " + std::to_string(to) +
                               "'s memory (no peer access: check `nvidia-smi topo -m`)");
    }
    harness::DeviceGuard guard(from);
    const cudaError_t result = cudaDeviceEnablePeerAccess(to, 0);
    if (result == cudaErrorPeerAccessAlreadyEnabled) {
        cudaGetLastError();  // not an error for us; clear it so later checks start clean
        return;
    }
    SY_CUDA_CHECK(result);
}

// Everything one measurement needs, allocated once for the largest size.
struct CopySetup {
    CopySetup(const P2pCopyOptions& options, size_t max_bytes)
        : src(options.src_device),
          dst(options.dst_device),
          forward_in(src, max_bytes),
          forward_out(dst, max_bytes),
          backward_in(dst, max_bytes),
          backward_out(src, max_bytes),
          src_stream(src),
          dst_stream(dst),
          src_flush(src),
          dst_flush(dst),
          aligner({src, dst}),
          timer(src),
          backward_done(dst) {
        // Defined contents, so the copies never read uninitialized memory.
        {
            harness::DeviceGuard guard(src);
            SY_CUDA_CHECK(cudaMemsetAsync(forward_in.get(), 1, max_bytes, src_stream.get()));
        }
        {
            harness::DeviceGuard guard(dst);
            SY_CUDA_CHECK(cudaMemsetAsync(backward_in.get(), 2, max_bytes, dst_stream.get()));
        }
        synchronize_devices({src, dst});
    }

    int src, dst;
    harness::DeviceBuffer forward_in, forward_out, backward_in, backward_out;
    harness::Stream src_stream, dst_stream;
    L2Flusher src_flush, dst_flush;
    StreamAligner aligner;
    EventTimer timer;  // on the source device's stream
    harness::Event backward_done;
};

// One timed iteration; returns microseconds.
double time_copy(CopySetup& s, size_t bytes, bool bidirectional) {
    synchronize_devices({s.src, s.dst});
    // The flushes give the host time to enqueue both directions before either starts.
    s.src_flush.flush(s.src_stream.get());
    s.dst_flush.flush(s.dst_stream.get());
    s.aligner.align({s.src_stream.get(), s.dst_stream.get()});
    s.timer.start(s.src_stream.get());
    SY_CUDA_CHECK(cudaMemcpyPeerAsync(s.forward_out.get(), s.dst, s.forward_in.get(), s.src, bytes,
                                      s.src_stream.get()));
    if (bidirectional) {
        // The reverse copy starts with the timed span and the span ends when both have finished,
        // so the time is that of the slower direction.
        SY_CUDA_CHECK(cudaStreamWaitEvent(s.dst_stream.get(), s.timer.start_event(), 0));
        SY_CUDA_CHECK(cudaMemcpyPeerAsync(s.backward_out.get(), s.src, s.backward_in.get(), s.dst, bytes,
                                          s.dst_stream.get()));
        SY_CUDA_CHECK(cudaEventRecord(s.backward_done.get(), s.dst_stream.get()));
        SY_CUDA_CHECK(cudaStreamWaitEvent(s.src_stream.get(), s.backward_done.get(), 0));
    }
    s.timer.stop(s.src_stream.get());
    return s.timer.elapsed_us();
}

P2pCopyResult measure_one(CopySetup& setup, size_t bytes, bool bidirectional, const P2pCopyOptions& options) {
    for (int i = 0; i < options.warmup; ++i) time_copy(setup, bytes, bidirectional);
    std::vector<double> samples;
    samples.reserve(options.iters);
    for (int i = 0; i < options.iters; ++i) samples.push_back(time_copy(setup, bytes, bidirectional));
    P2pCopyResult result;
    result.bytes = bytes;
    result.bidirectional = bidirectional;
    result.time_us = summarize(std::move(samples));
    result.gbps_per_direction = gbps(static_cast<double>(bytes), result.time_us.median).value_or(0.0);
    return result;
}

}  // namespace

void enable_peer_access(int device_a, int device_b) {
    if (device_a == device_b) return;  // a device reaches its own memory
    enable_one_way(device_a, device_b);
    enable_one_way(device_b, device_a);
}

std::vector<P2pCopyResult> measure_p2p_copy(const P2pCopyOptions& options) {
    if (options.sizes.empty() || options.iters <= 0) return {};
    enable_peer_access(options.src_device, options.dst_device);
    CopySetup setup(options, *std::max_element(options.sizes.begin(), options.sizes.end()));
    std::vector<P2pCopyResult> results;
    for (const size_t bytes : options.sizes) {
        results.push_back(measure_one(setup, bytes, false, options));
        results.push_back(measure_one(setup, bytes, true, options));
    }
    return results;
}

}  // namespace switchyard::bench
