// The JIT: compiles kernel templates from kernels/switchyard/ with NVRTC, caches the cubins on
// disk, loads them with the CUDA driver API and launches them.
//
// Contract for device code compiled through here:
//   - A kernel takes exactly ONE by-value argument struct, declared
//       template <...> __global__ void my_kernel(const __grid_constant__ MyArgs args);
//     The host fills the same struct (the header defining it includes
//     "switchyard/common/base.cuh" and nothing from the host standard library) and passes it to
//     launch(). One struct means the argument list is written once, for host and device.
//   - Headers are included by their path relative to kernels/, e.g.
//     #include "switchyard/common/base.cuh" (never relative "../" paths): NVRTC sees the embedded
//     copies under exactly those names.
//   - Compile-time shape constants are template arguments spelled in KernelSource::kernel.
//
// Environment knobs (read at every compile, see knobs.hpp): SWITCHYARD_CACHE_DIR,
// SWITCHYARD_JIT_DEBUG, SWITCHYARD_JIT_DUMP_PTX, SWITCHYARD_JIT_DUMP_SASS, SWITCHYARD_JIT_LINE_INFO,
// SWITCHYARD_JIT_FAIL_ON_SPILLS.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace switchyard::jit {

// What to compile: the generated translation unit includes `header` and instantiates `kernel`.
struct KernelSource {
    std::string family;  // [A-Za-z0-9_]+, e.g. "ht_dispatch"; names logs and cache files
    std::string header;  // relative to kernels/, e.g. "switchyard/testing/sample_kernels.cuh"
    std::string kernel;  // name of the instantiation, e.g. "switchyard::device::scale_kernel<128, 4>"
};

// Which compiler turns a KernelSource into a cubin.
enum class Compiler {
    kNvrtc,     // in process (every kernel family but the GIN ones)
    kNvccNccl,  // nvcc in a subprocess against the NCCL headers the library was built with, with
                // SY_NET_WITH_NCCL defined: kernels on the NetGin backend (nvcc_program.hpp)
};

struct CompileOptions {
    std::string arch;                  // "sm_90a", "sm_100a", ...; see arch_for_device()
    Compiler compiler = Compiler::kNvrtc;
    bool line_info = false;            // -lineinfo (also forced on by SWITCHYARD_JIT_LINE_INFO=1)
    std::vector<std::string> defines;  // "NAME" or "NAME=VALUE", passed as -D
};

struct CompiledKernel {
    std::string key;           // 32 hex digits; the cache key
    std::string cubin_path;    // <cache dir>/<family>-<key>.cubin
    std::string cubin;         // the cubin bytes (an ELF image)
    std::string lowered_name;  // mangled symbol of the kernel inside the cubin
    bool cache_hit = false;    // true when the cubin came from the disk cache
    std::string log;           // NVRTC + ptxas log (kept in <family>-<key>.log for cache hits)
    int num_registers = -1;    // per thread, from ptxas; -1 when the log did not say
    int spill_bytes = -1;      // spill stores + spill loads in bytes, summed over the TU's functions
    int stack_bytes = -1;      // stack frame of the entry function
};

// Compiles (or fetches from the disk cache) one kernel instantiation. Needs no GPU and no driver.
// Throws CompileError (with the log) when NVRTC fails or when SWITCHYARD_JIT_FAIL_ON_SPILLS=1 and
// ptxas reported spills, InvalidArgument for a malformed source, Error when the cache is unusable.
// Thread-safe; concurrent processes may compile the same kernel into the same cache directory.
CompiledKernel compile(const KernelSource& source, const CompileOptions& options);

// Warms the disk cache for `arch` (before CUDA-graph capture, or on a CPU build box).
void precompile(const std::vector<KernelSource>& sources, const std::string& arch,
                const CompileOptions& base_options = {});

// "sm_90a" for compute capability 9.0, "sm_100a" for 10.0 (the arch-specific features our kernels
// use: TMA multicast, wgmma, ...), otherwise "sm_<major><minor>".
std::string arch_for_compute_capability(int major, int minor);
// Same, for a device queried through the driver. Throws UnsupportedError without a driver.
std::string arch_for_device(int device);

// A kernel loaded into the primary context of one device (the context the CUDA runtime uses, so
// pointers and streams from cudaMalloc/cudaStreamCreate work with it). Owned by the process-wide
// cache behind get_kernel(); never copied, never unloaded.
class Kernel {
  public:
    Kernel(const KernelSource& source, CompiledKernel compiled, int device, void* context, void* module,
           void* function, long long param_bytes);
    Kernel(const Kernel&) = delete;
    Kernel& operator=(const Kernel&) = delete;

    const KernelSource& source() const { return source_; }
    const CompiledKernel& compiled() const { return compiled_; }
    int device() const { return device_; }
    void* context() const { return context_; }    // CUcontext
    void* function() const { return function_; }  // CUfunction
    // Size of the kernel's single parameter as the driver reports it; -1 when the driver is too old
    // to say (then launch() cannot check the argument struct's size).
    long long param_bytes() const { return param_bytes_; }

    // Raises the kernel's dynamic shared memory limit to at least `bytes` (once per new maximum).
    void ensure_dynamic_shared(unsigned bytes) const;

  private:
    KernelSource source_;
    CompiledKernel compiled_;
    int device_;
    void* context_;
    void* module_;
    void* function_;
    long long param_bytes_;
    mutable std::mutex shared_mutex_;
    mutable unsigned max_dynamic_shared_ = 48 * 1024;  // what kernels get without opting in
};

// Compiles `source` for the device's arch (disk cache) and loads it (in-process cache). Thread-safe;
// the reference stays valid for the life of the process. `options.arch` is filled in from the
// device when empty. Throws UnsupportedError when no CUDA driver is available.
const Kernel& get_kernel(const KernelSource& source, int device, const CompileOptions& options = {});
// The kernel get_kernel() with these arguments would return if it is loaded already, else null
// (nothing compiled, nothing loaded). Thread-safe.
const Kernel* loaded_kernel(const KernelSource& source, int device, const CompileOptions& options = {});

// A launcher's fixed kernel, looked up once per device: get_kernel() builds its cache key and
// takes two locks on every call, which is host time on every op. For kernels whose source does
// not depend on the call (a launcher keeps one of these as a function-local static).
class CachedKernel {
  public:
    // `options`: e.g. Compiler::kNvccNccl for a kernel on the GIN backend (the arch still comes from
    // the device when empty).
    explicit CachedKernel(KernelSource source, CompileOptions options = {})
        : source_(std::move(source)), options_(std::move(options)) {}
    const KernelSource& source() const { return source_; }
    const CompileOptions& options() const { return options_; }
    const Kernel& get(int device) const {
        if (device >= 0 && device < kMaxDevices)
            if (const Kernel* kernel = loaded_[device].load(std::memory_order_acquire)) return *kernel;
        const Kernel& kernel = get_kernel(source_, device, options_);
        if (device >= 0 && device < kMaxDevices) loaded_[device].store(&kernel, std::memory_order_release);
        return kernel;
    }

  private:
    static constexpr int kMaxDevices = 64;
    KernelSource source_;
    CompileOptions options_;
    mutable std::array<std::atomic<const Kernel*>, kMaxDevices> loaded_{};
};

struct LaunchConfig {
    unsigned grid[3] = {1, 1, 1};
    unsigned block[3] = {1, 1, 1};
    unsigned shared_bytes = 0;                   // dynamic shared memory; > 48 KiB is opted into
    void* stream = nullptr;                      // cudaStream_t / CUstream; nullptr = legacy default
    bool cooperative = false;                    // grid-wide co-residency (grid sync)
    unsigned cluster_x = 1;                      // thread-block cluster size along x; must divide grid[0]
    bool programmatic_dependent_launch = false;  // may start before the previous kernel in the stream ends
};

// Launches `kernel` with one by-value argument (the bytes at args_struct, args_size long).
void launch(const Kernel& kernel, const LaunchConfig& config, const void* args_struct, size_t args_size);

template <class Args>
void launch(const Kernel& kernel, const LaunchConfig& config, const Args& args) {
    launch(kernel, config, &args, sizeof(Args));
}

}  // namespace switchyard::jit
