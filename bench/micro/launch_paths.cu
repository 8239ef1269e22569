// Microbenchmark: what it costs to start an LL-shaped grid (G blocks of 256 threads, 4 KiB of
// dynamic shared memory, as an LL op launches) in each way an op could start it, under CUDA-graph
// replay as the LL bench times its ops. It decides whether chaining (programmatic dependent
// launch) or a persistent kernel woken by a doorbell would take the launch off an LL op's critical
// path (docs/architecture.md §12; issue 26, item 4).
//
// Every case is one graph, event-timed around one replay behind a device-side gate; median and
// minimum of the iterations. "alone": the graph by itself. "after": the graph begins with a busy
// kernel (one block spinning `busy_us`, as an engine's router or GEMM before the op), and the case
// reports the graph's time minus that of a graph of the busy kernel alone, i.e. what starting the
// grid adds behind the previous kernel.
//   plain        an empty kernel, plain launch
//   cooperative  the same, cooperative launch (as the LL kernels launch today)
//   pdl          (after) plain launch with programmatic stream serialization; every block waits for
//                the busy kernel (griddepcontrol.wait) before it ends, as an op's kernel would
//                before it reads the previous kernel's output
//   pdl_trigger  (after) as pdl, and the busy kernel lets dependents launch at its start (a
//                previous kernel written to allow it)
//   doorbell     a persistent kernel of G blocks, started once before the case; the op's graph
//                writes the doorbell (a stream memory operation), waits until the done word is
//                set (stream wait-value) and clears it (stream write). On the device each
//                block's thread 0 polls the doorbell, the block meets (__syncthreads), thread 0
//                adds one to an arrival counter, and the last block to arrive clears the doorbell
//                and sets the done word: what a persistent op would do at least, with no data.
// A device wait that does not end within 2 s prints and ends the persistent kernel; a replay that
// does not finish within 5 s ends the program with an error (nothing waits for ever).
//
// Build and run (sm_90a; not part of the library build, which needs no nvcc):
//   nvcc -O3 -std=c++20 -arch=sm_90a -Ikernels bench/micro/launch_paths.cu -lcuda -o launch_paths
//   ./launch_paths [iters=200] [busy_us=20]
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "micro_common.cuh"
#include "switchyard/common/ptx.cuh"

namespace ptx = switchyard::device::ptx;

#define CHECK_CU(call)                                                                \
    do {                                                                              \
        CUresult result_ = (call);                                                    \
        if (result_ != CUDA_SUCCESS) {                                                \
            const char* text_ = nullptr;                                              \
            cuGetErrorString(result_, &text_);                                        \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, text_); \
            std::exit(1);                                                             \
        }                                                                             \
    } while (0)

constexpr int kThreads = 256;
constexpr int kSharedBytes = 4096;
constexpr uint64_t kWaitLimitNs = 2000000000ull;

// The words the doorbell case shares between the graph's memory operations and the kernel.
constexpr uint32_t kStop = 2;  // the doorbell's value that ends the persistent kernel

struct Doorbell {
    uint32_t ring;     // 1: an op is due; 0: none; kStop: the kernel ends
    uint32_t done;     // 1: the op is done (the graph clears it)
    uint32_t arrived;  // blocks that saw the doorbell, over all ops
};

// The first value of `word` that is `ready`, or kStop when none comes within 2 s.
__device__ uint32_t wait_word(const uint32_t* word, bool (*ready)(uint32_t), const char* what) {
    const uint64_t start = ptx::globaltimer_ns();
    for (;;) {
        const uint32_t value = ptx::ld_acquire_sys(word);
        if (ready(value)) return value;
        if (ptx::globaltimer_ns() - start > kWaitLimitNs) {
            printf("launch_paths: block %d: no %s within 2 s\n", blockIdx.x, what);
            return kStop;
        }
    }
}

__device__ bool rung(uint32_t value) {
    return value != 0;
}
__device__ bool cleared(uint32_t value) {
    return value != 1;
}

__global__ void __launch_bounds__(kThreads) empty_kernel(int wait_for_previous) {
    if (wait_for_previous) ptx::grid_dependency_wait();
}

__global__ void busy_kernel(uint64_t busy_ns, int trigger) {
    if (trigger) ptx::launch_dependents();
    const uint64_t start = ptx::globaltimer_ns();
    while (ptx::globaltimer_ns() - start < busy_ns) {
    }
}

// The persistent kernel: one op per ring of the doorbell, until the doorbell says kStop.
__global__ void __launch_bounds__(kThreads) persistent_kernel(Doorbell* bell) {
    __shared__ uint32_t ring;
    for (uint32_t op = 1;; ++op) {
        if (threadIdx.x == 0) ring = wait_word(&bell->ring, rung, "doorbell");
        __syncthreads();
        if (ring != 1) return;
        if (threadIdx.x == 0) {
            const uint32_t before = atomicAdd(&bell->arrived, 1u);
            if (before == op * gridDim.x - 1) {
                // Every block saw this ring: clear it before the op is reported done, so that no
                // block mistakes it for the next op's.
                atomicExch(&bell->ring, 0u);
                ptx::fence_acq_rel_sys();
                atomicExch(&bell->done, 1u);
            } else if (wait_word(&bell->ring, cleared, "cleared doorbell") == kStop) {
                ring = kStop;
            }
        }
        __syncthreads();
        if (ring == kStop) return;
    }
}

struct Timing {
    double median_us;
    double min_us;
};

// Waits for `event`, or ends the program when it has not happened within 5 s (a persistent kernel
// that left its loop never answers the graph's wait).
void wait_for(cudaEvent_t event) {
    const auto start = std::chrono::steady_clock::now();
    cudaError_t status;
    while ((status = cudaEventQuery(event)) == cudaErrorNotReady) {
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(5)) {
            std::fprintf(stderr, "launch_paths: a replay did not finish within 5 s\n");
            std::exit(1);
        }
    }
    CHECK(status);
}

// Replays `graph` behind the gate, `iters` times after one warm-up, event-timed.
Timing time_graph(cudaGraphExec_t graph, cudaStream_t stream, int* open, int iters) {
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    std::vector<double> samples;
    for (int it = 0; it <= iters; ++it) {
        *reinterpret_cast<volatile int*>(open) = 0;
        gate_kernel<<<1, 1, 0, stream>>>(open);
        CHECK(cudaEventRecord(start, stream));
        CHECK(cudaGraphLaunch(graph, stream));
        CHECK(cudaEventRecord(stop, stream));
        *reinterpret_cast<volatile int*>(open) = 1;
        wait_for(stop);
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, start, stop));
        if (it > 0) samples.push_back(double(ms) * 1000.0);
    }
    CHECK(cudaEventDestroy(start));
    CHECK(cudaEventDestroy(stop));
    std::sort(samples.begin(), samples.end());
    return {samples[samples.size() / 2], samples.front()};
}

// Captures what `enqueue` puts on `stream` as a graph and times its replays.
Timing time_captured(cudaStream_t stream, int* open, int iters, const std::function<void()>& enqueue) {
    cudaGraph_t graph = nullptr;
    CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    enqueue();
    CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    CHECK(cudaGraphInstantiate(&exec, graph, 0));
    CHECK(cudaGraphDestroy(graph));
    const Timing timing = time_graph(exec, stream, open, iters);
    CHECK(cudaGraphExecDestroy(exec));
    return timing;
}

void launch_empty(cudaStream_t stream, int grid, bool cooperative, bool programmatic) {
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(grid);
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = kSharedBytes;
    config.stream = stream;
    cudaLaunchAttribute attribute{};
    if (cooperative) {
        attribute.id = cudaLaunchAttributeCooperative;
        attribute.val.cooperative = 1;
    } else if (programmatic) {
        attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
        attribute.val.programmaticStreamSerializationAllowed = 1;
    }
    config.attrs = &attribute;
    config.numAttrs = cooperative || programmatic ? 1 : 0;
    CHECK(cudaLaunchKernelEx(&config, empty_kernel, int(programmatic)));
}

int main(int argc, char** argv) {
    const int iters = argc > 1 ? std::atoi(argv[1]) : 200;
    const double busy_us = argc > 2 ? std::atof(argv[2]) : 20.0;
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
        std::printf("launch_paths: no GPU\n");
        return 0;
    }
    CHECK(cudaSetDevice(0));
    cudaDeviceProp prop{};
    CHECK(cudaGetDeviceProperties(&prop, 0));
    int* open = nullptr;
    CHECK(cudaHostAlloc(&open, sizeof(int), cudaHostAllocMapped | cudaHostAllocPortable));
    cudaStream_t stream, resident;
    CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&resident, cudaStreamNonBlocking));
    Doorbell* bell = nullptr;
    CHECK(cudaMalloc(&bell, sizeof(Doorbell)));
    CUstream cu_stream = reinterpret_cast<CUstream>(stream);
    const CUdeviceptr ring = reinterpret_cast<CUdeviceptr>(&bell->ring);
    const CUdeviceptr done = reinterpret_cast<CUdeviceptr>(&bell->done);
    const uint64_t busy_ns = uint64_t(busy_us * 1000.0);

    std::printf("%s, %d SMs; %d iterations, busy kernel %.0f us\n", prop.name, prop.multiProcessorCount,
                iters, busy_us);
    std::printf("%-12s %-6s %5s %10s %10s\n", "case", "where", "grid", "median_us", "min_us");
    auto report = [](const char* name, const char* where, int grid, Timing t) {
        std::printf("%-12s %-6s %5d %10.2f %10.2f\n", name, where, grid, t.median_us, t.min_us);
    };
    for (const int grid : {prop.multiProcessorCount / 2, prop.multiProcessorCount}) {
        auto busy = [&](bool trigger) { busy_kernel<<<1, 32, 0, stream>>>(busy_ns, trigger ? 1 : 0); };
        auto doorbell_op = [&] {
            CHECK_CU(cuStreamWriteValue32(cu_stream, ring, 1, 0));
            CHECK_CU(cuStreamWaitValue32(cu_stream, done, 1, CU_STREAM_WAIT_VALUE_EQ));
            CHECK_CU(cuStreamWriteValue32(cu_stream, done, 0, 0));
        };
        struct Case {
            const char* name;
            std::function<void()> op;
            bool trigger;
            bool alone;
        };
        const std::vector<Case> cases = {
            {"plain", [&] { launch_empty(stream, grid, false, false); }, false, true},
            {"cooperative", [&] { launch_empty(stream, grid, true, false); }, false, true},
            {"pdl", [&] { launch_empty(stream, grid, false, true); }, false, false},
            {"pdl_trigger", [&] { launch_empty(stream, grid, false, true); }, true, false},
            {"doorbell", doorbell_op, false, true},
        };
        const Timing busy_alone = time_captured(stream, open, iters, [&] { busy(false); });
        const Timing busy_triggering = time_captured(stream, open, iters, [&] { busy(true); });
        report("busy", "alone", 1, busy_alone);
        for (const Case& c : cases) {
            const bool persistent = std::string(c.name) == "doorbell";
            if (persistent) {
                CHECK(cudaMemset(bell, 0, sizeof(Doorbell)));
                CHECK(cudaDeviceSynchronize());
                persistent_kernel<<<grid, kThreads, kSharedBytes, resident>>>(bell);
                CHECK(cudaGetLastError());
            }
            if (c.alone) report(c.name, "alone", grid, time_captured(stream, open, iters, c.op));
            const Timing base = c.trigger ? busy_triggering : busy_alone;
            const Timing after = time_captured(stream, open, iters, [&] {
                busy(c.trigger);
                c.op();
            });
            report(c.name, "after", grid, {after.median_us - base.median_us, after.min_us - base.min_us});
            if (persistent) {
                CHECK(cudaMemcpy(&bell->ring, &kStop, sizeof(kStop), cudaMemcpyHostToDevice));
                CHECK(cudaStreamSynchronize(resident));
                Doorbell words{};
                CHECK(cudaMemcpy(&words, bell, sizeof(words), cudaMemcpyDeviceToHost));
                // Warm-up and iterations of both graphs: every block arrived once per op.
                const uint64_t ops = 2ull * (iters + 1);
                if (words.arrived != ops * uint64_t(grid)) {
                    std::printf("launch_paths: doorbell: %u arrivals, expected %llu: results void\n",
                                words.arrived, (unsigned long long)(ops * grid));
                    return 1;
                }
            }
        }
    }
    CHECK(cudaDeviceSynchronize());
    return 0;
}
