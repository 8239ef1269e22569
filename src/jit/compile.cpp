// compile() and precompile(): the cache-aware front of the JIT. NVRTC details live in
// nvrtc_program.cpp, file handling in disk_cache.cpp.
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "jit/disk_cache.hpp"
#include "jit/embedded_headers.hpp"
#include "jit/hash.hpp"
#include "jit/jit.hpp"
#include "jit/knobs.hpp"
#include "jit/nvcc_program.hpp"
#include "jit/nvrtc_program.hpp"
#include "jit/ptxas_log.hpp"
#include "jit/sass_dump.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::jit {
namespace {

// Bumped whenever the cache layout or the meaning of a cached field changes.
constexpr const char* kCacheFormat = "switchyard-jit-key-v2";

std::string cache_key(const KernelSource& source, const std::string& generated,
                      const std::vector<std::string>& flags, const std::string& arch, Compiler compiler) {
    Hasher128 hasher;
    hasher.field(kCacheFormat);
    hasher.field(generated);
    // The headers this kernel compiles (its include closure): an edit elsewhere keeps its cubin.
    hasher.field(include_closure_digest(source.header));
    hasher.field(arch);
    if (compiler == Compiler::kNvccNccl) {
        // Its own key: nvcc's version and the NCCL headers' (ncclDevComm changes between versions).
        const NvccToolchain& toolchain = nvcc_toolchain();
        hasher.field("nvcc");
        hasher.field(toolchain.version);
        hasher.field("nccl " + std::to_string(toolchain.nccl_version_code));
    } else {
        hasher.field(nvrtc_version());
    }
    for (const auto& flag : flags) hasher.field(flag);
    return hasher.hex();
}

// One mutex per cache key: threads of one process (e.g. ranks run as threads) that want the same
// kernel compile it once and the others then hit the disk cache. Different keys compile in parallel.
std::shared_ptr<std::mutex> key_mutex(const std::string& key) {
    static std::mutex map_mutex;
    static std::map<std::string, std::shared_ptr<std::mutex>> mutexes;
    std::lock_guard<std::mutex> lock(map_mutex);
    auto& slot = mutexes[key];
    if (!slot) slot = std::make_shared<std::mutex>();
    return slot;
}

void validate_arch(const std::string& arch) {
    bool ok = arch.size() > 3 && arch.compare(0, 3, "sm_") == 0;
    size_t i = 3;
    while (ok && i < arch.size() && arch[i] >= '0' && arch[i] <= '9') ++i;
    ok = ok && i > 3;
    while (ok && i < arch.size()) ok = (arch[i] == 'a' || arch[i] == 'f') && ++i == arch.size();
    if (!ok)
        throw InvalidArgument(
            "jit: arch '" + arch +
            "' is not a real GPU architecture such as sm_90a or sm_100a (see arch_for_device())");
}

std::string describe(const KernelSource& source, const std::string& arch) {
    return source.kernel + " [" + source.family + ", " + arch + "]";
}

// The ptxas lines of a log, for error messages that should stay short.
std::string ptxas_lines(const std::string& log) {
    std::istringstream in(log);
    std::string line, out;
    while (std::getline(in, line))
        if (line.rfind("ptxas", 0) == 0) out += line + "\n";
    return out;
}

CompiledKernel compile_fresh(const KernelSource& source, const std::string& generated,
                             const std::vector<std::string>& flags, const std::string& arch,
                             const CachePaths& paths, const Knobs& knobs, Compiler compiler) {
    const auto start = std::chrono::steady_clock::now();
    const bool nvcc = compiler == Compiler::kNvccNccl;
    NvrtcResult nvrtc = nvcc ? run_nvcc(source, generated, flags, paths.dir)
                             : run_nvrtc(source, generated, flags, knobs.dump_ptx);
    const double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();

    CompiledKernel kernel;
    kernel.cubin_path = paths.cubin;
    kernel.cubin = std::move(nvrtc.cubin);
    kernel.lowered_name = std::move(nvrtc.lowered_name);
    kernel.log = std::move(nvrtc.log);
    const PtxasStats stats = parse_ptxas_log(kernel.log, kernel.lowered_name);
    kernel.num_registers = stats.num_registers;
    kernel.spill_bytes = stats.spill_bytes;
    kernel.stack_bytes = stats.stack_bytes;
    if (!looks_like_cubin(kernel.cubin))
        throw CompileError(std::string("jit: ") + (nvcc ? "nvcc" : "NVRTC") +
                           " returned something that is not a cubin for " + source.kernel);

    cache_store(paths, kernel);
    if (knobs.dump_ptx && !nvcc) write_file_atomic(paths.ptx, nvrtc.ptx);
    if (knobs.debug) {
        std::ostringstream message;
        message << "compiled " << describe(source, arch) << (nvcc ? " with nvcc" : "") << " in "
                << static_cast<int>(ms) << " ms: " << kernel.num_registers << " registers, "
                << kernel.spill_bytes << " spill bytes, " << kernel.stack_bytes << " stack bytes -> "
                << paths.cubin;
        if (knobs.dump_ptx) message << " (+ " << paths.ptx << ")";
        debug_log(message.str());
    }
    return kernel;
}

}  // namespace

CompiledKernel compile(const KernelSource& source, const CompileOptions& options) {
    validate_source(source);
    validate_arch(options.arch);
    const Knobs knobs = read_knobs();
    CompileOptions effective = options;
    effective.line_info = options.line_info || knobs.line_info;

    const std::string generated = generate_source(source);
    const bool nvcc = effective.compiler == Compiler::kNvccNccl;
    const std::vector<std::string> flags =
        nvcc ? nvcc_flags(effective, nvcc_toolchain()) : compile_flags(effective);
    const std::string key = cache_key(source, generated, flags, effective.arch, effective.compiler);
    const CachePaths paths = cache_paths(knobs.cache_dir, source.family, key);
    ensure_cache_dir(paths.dir);

    CompiledKernel kernel;
    {
        const auto mutex = key_mutex(key);
        std::lock_guard<std::mutex> lock(*mutex);
        auto cached = cache_lookup(paths);
        // A PTX dump needs NVRTC's output, which the cache does not keep: recompile once for it.
        const bool need_ptx = knobs.dump_ptx && !nvcc && !std::filesystem::exists(paths.ptx);
        if (cached && !need_ptx) {
            kernel = std::move(*cached);
            kernel.cache_hit = true;
            if (knobs.debug)
                debug_log("cache hit " + describe(source, effective.arch) + ": " +
                          std::to_string(kernel.num_registers) + " registers, " +
                          std::to_string(kernel.spill_bytes) + " spill bytes <- " + paths.cubin);
        } else {
            if (knobs.debug && !cached && std::filesystem::exists(paths.cubin))
                debug_log("cache entry " + paths.cubin + " is incomplete or corrupt; recompiling");
            kernel =
                compile_fresh(source, generated, flags, effective.arch, paths, knobs, effective.compiler);
        }
        kernel.key = key;
    }

    if (knobs.dump_sass && !std::filesystem::exists(paths.sass)) {
        const std::string problem = dump_sass(paths.cubin, paths.sass);
        // Printed even without SWITCHYARD_JIT_DEBUG: the user asked for the dump and should hear why
        // there is none.
        if (!problem.empty())
            debug_log(problem);
        else if (knobs.debug)
            debug_log("wrote " + paths.sass);
    }

    if (knobs.fail_on_spills && kernel.spill_bytes > 0)
        throw CompileError("jit: kernel " + describe(source, effective.arch) + " spills registers (" +
                           std::to_string(kernel.spill_bytes) + " bytes of spill stores + loads, " +
                           std::to_string(kernel.num_registers) +
                           " registers) and SWITCHYARD_JIT_FAIL_ON_SPILLS=1 is set. ptxas said:\n" +
                           ptxas_lines(kernel.log) + "(cubin: " + kernel.cubin_path + ")");
    return kernel;
}

void precompile(const std::vector<KernelSource>& sources, const std::string& arch,
                const CompileOptions& base_options) {
    CompileOptions options = base_options;
    options.arch = arch;
    for (const auto& source : sources) compile(source, options);
}

}  // namespace switchyard::jit
