// The JIT on a machine without a GPU: NVRTC compilation for sm_90a and sm_100a, the disk cache
// (hits, corruption, concurrent writers from threads and from processes), the error paths and the
// knobs. Loading and launching need a driver; without one the test checks the error message, with
// one (a GPU box) it runs a real launch.
#include <cuda_runtime.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <latch>
#include <sstream>
#include <thread>

#include "common/testing.hpp"
#include "jit/hash.hpp"
#include "jit/embedded_headers.hpp"
#include "jit/jit.hpp"
#include "jit/ptxas_log.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/testing/sample_args.cuh"

namespace {

namespace fs = std::filesystem;
namespace jit = switchyard::jit;

const char* const kSampleHeader = "switchyard/testing/sample_kernels.cuh";

jit::KernelSource scale_source(int block_size, int scale) {
    return {"jit_test", kSampleHeader,
            "switchyard::device::scale_kernel<" + std::to_string(block_size) + ", " + std::to_string(scale) +
                ">"};
}

jit::CompileOptions for_arch(const std::string& arch) {
    jit::CompileOptions options;
    options.arch = arch;
    return options;
}

// One fresh directory per test run under /tmp, removed at exit by the process that made it (not by
// forked children, which leave through _exit).
class TempRoot {
  public:
    TempRoot() {
        char pattern[] = "/tmp/switchyard-jit-test-XXXXXX";
        if (!::mkdtemp(pattern)) std::abort();
        path_ = pattern;
        owner_ = ::getpid();
    }
    ~TempRoot() {
        if (::getpid() != owner_) return;
        std::error_code ignored;
        fs::remove_all(path_, ignored);
    }
    const std::string& path() const { return path_; }

  private:
    std::string path_;
    pid_t owner_;
};

const std::string& temp_root() {
    static TempRoot root;
    return root.path();
}

// Points SWITCHYARD_CACHE_DIR at <root>/<name> and returns that path.
std::string use_cache_dir(const std::string& name) {
    const std::string dir = temp_root() + "/" + name;
    ::setenv("SWITCHYARD_CACHE_DIR", dir.c_str(), 1);
    return dir;
}

std::string read_bytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
}

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << bytes;
}

bool is_elf(const std::string& bytes) {
    return bytes.size() > 4 && bytes.compare(0, 4,
                                             "\x7f"
                                             "ELF") == 0;
}

size_t count_temp_files(const std::string& dir) {
    size_t count = 0;
    for (const auto& entry : fs::directory_iterator(dir))
        if (entry.path().filename().string().find(".tmp.") != std::string::npos) ++count;
    return count;
}

}  // namespace

SY_TEST(jit, arch_names) {
    SY_CHECK_EQ(jit::arch_for_compute_capability(9, 0), std::string("sm_90a"));
    SY_CHECK_EQ(jit::arch_for_compute_capability(10, 0), std::string("sm_100a"));
    SY_CHECK_EQ(jit::arch_for_compute_capability(8, 0), std::string("sm_80"));
    SY_CHECK_EQ(jit::arch_for_compute_capability(12, 0), std::string("sm_120"));
}

SY_TEST(jit, hash_is_stable_and_field_separated) {
    SY_CHECK_EQ(jit::hash128_hex("abc"), jit::hash128_hex("abc"));
    SY_CHECK(jit::hash128_hex("abc") != jit::hash128_hex("abd"));
    SY_CHECK_EQ(jit::hash128_hex("").size(), size_t{32});
    jit::Hasher128 a, b;
    a.field("ab");
    a.field("c");
    b.field("a");
    b.field("bc");
    SY_CHECK(a.hex() != b.hex());
}

SY_TEST(jit, ptxas_log_parser) {
    const std::string log =
        "ptxas info    : 0 bytes gmem\n"
        "ptxas info    : Compiling entry function '_Z5otherv' for 'sm_90a'\n"
        "ptxas info    : Function properties for _Z5otherv\n"
        "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas info    : Used 12 registers, used 0 barriers\n"
        "ptxas info    : Compiling entry function '_Z4mainv' for 'sm_90a'\n"
        "ptxas info    : Function properties for _Z6helperv\n"
        "ptxas         .     16 bytes stack frame, 8 bytes spill stores, 4 bytes spill loads\n"
        "ptxas info    : Function properties for _Z4mainv\n"
        "ptxas         .     408 bytes stack frame, 756 bytes spill stores, 760 bytes spill loads\n"
        "ptxas info    : Used 32 registers, used 1 barriers, 408 bytes cumulative stack size\n";
    const jit::PtxasStats main_stats = jit::parse_ptxas_log(log, "_Z4mainv");
    SY_CHECK_EQ(main_stats.num_registers, 32);
    SY_CHECK_EQ(main_stats.stack_bytes, 408);
    SY_CHECK_EQ(main_stats.spill_bytes, 8 + 4 + 756 + 760);
    const jit::PtxasStats first = jit::parse_ptxas_log(log, "");
    SY_CHECK_EQ(first.num_registers, 12);
    SY_CHECK_EQ(first.stack_bytes, 0);
    const jit::PtxasStats none = jit::parse_ptxas_log("", "_Z4mainv");
    SY_CHECK_EQ(none.num_registers, -1);
    SY_CHECK_EQ(none.spill_bytes, -1);
}

// Asking whether a kernel is loaded compiles and loads nothing: the answer for a kernel no call
// loaded is no, with or without a GPU (launchers of co-located ranks refuse such a kernel).
SY_TEST(jit, loaded_kernel_loads_nothing) {
    const std::string dir = use_cache_dir("is_loaded");
    SY_CHECK(jit::loaded_kernel(scale_source(96, 2), 0, for_arch("sm_90a")) == nullptr);
    SY_CHECK(!fs::exists(dir) || fs::is_empty(dir));
}

SY_TEST(jit, compile_sm90a_then_cache_hit) {
    use_cache_dir("basic");
    const auto first = jit::compile(scale_source(128, 4), for_arch("sm_90a"));
    SY_CHECK(!first.cache_hit);
    SY_CHECK_EQ(first.key.size(), size_t{32});
    SY_CHECK(fs::exists(first.cubin_path));
    SY_CHECK(is_elf(read_bytes(first.cubin_path)));
    SY_CHECK(read_bytes(first.cubin_path) == first.cubin);
    SY_CHECK_MSG(first.num_registers > 0, first.log);
    SY_CHECK_EQ(first.spill_bytes, 0);
    SY_CHECK(first.lowered_name.find("scale_kernel") != std::string::npos);
    SY_CHECK(first.log.find("sm_90a") != std::string::npos);

    const auto second = jit::compile(scale_source(128, 4), for_arch("sm_90a"));
    SY_CHECK(second.cache_hit);
    SY_CHECK_EQ(second.key, first.key);
    SY_CHECK_EQ(second.cubin_path, first.cubin_path);
    SY_CHECK(second.cubin == first.cubin);
    SY_CHECK_EQ(second.lowered_name, first.lowered_name);
    SY_CHECK_EQ(second.num_registers, first.num_registers);
    SY_CHECK_EQ(second.spill_bytes, first.spill_bytes);
    SY_CHECK_EQ(second.log, first.log);
}

SY_TEST(jit, compile_sm100a) {
    use_cache_dir("basic");
    const auto sm100 = jit::compile(scale_source(128, 4), for_arch("sm_100a"));
    SY_CHECK(is_elf(read_bytes(sm100.cubin_path)));
    SY_CHECK_MSG(sm100.num_registers > 0, sm100.log);
    SY_CHECK(sm100.log.find("sm_100a") != std::string::npos);
    // Same source, other arch: its own cache entry.
    const auto sm90 = jit::compile(scale_source(128, 4), for_arch("sm_90a"));
    SY_CHECK(sm100.key != sm90.key);
}

SY_TEST(jit, corrupt_cache_entries_are_recompiled) {
    use_cache_dir("corrupt");
    const auto good = jit::compile(scale_source(128, 4), for_arch("sm_90a"));
    const std::string bytes = read_bytes(good.cubin_path);
    const std::string meta_path = good.cubin_path.substr(0, good.cubin_path.size() - 6) + ".log";
    SY_CHECK(fs::exists(meta_path));

    write_bytes(good.cubin_path, bytes.substr(0, bytes.size() / 2));  // truncated
    auto again = jit::compile(scale_source(128, 4), for_arch("sm_90a"));
    SY_CHECK(!again.cache_hit);
    SY_CHECK(read_bytes(good.cubin_path) == bytes);

    std::string flipped = bytes;  // same size, one byte changed: only the hash can tell
    flipped[flipped.size() / 2] ^= 0x5a;
    write_bytes(good.cubin_path, flipped);
    again = jit::compile(scale_source(128, 4), for_arch("sm_90a"));
    SY_CHECK(!again.cache_hit);
    SY_CHECK(read_bytes(good.cubin_path) == bytes);

    write_bytes(meta_path, "switchyard-jit-cache 1\ncubin_bytes: 12\n");  // truncated metadata
    again = jit::compile(scale_source(128, 4), for_arch("sm_90a"));
    SY_CHECK(!again.cache_hit);
    SY_CHECK(jit::compile(scale_source(128, 4), for_arch("sm_90a")).cache_hit);
}

SY_TEST(jit, concurrent_processes_publish_one_complete_cubin) {
    const std::string dir = use_cache_dir("fork");
    const jit::KernelSource source = scale_source(256, 3);
    int start[2];
    SY_CHECK(::pipe(start) == 0);
    pid_t children[2];
    for (int child = 0; child < 2; ++child) {
        children[child] = ::fork();
        SY_CHECK(children[child] >= 0);
        if (children[child] == 0) {
            // Child: wait until the parent closes the pipe so both compile at the same moment.
            ::close(start[1]);
            char byte;
            while (::read(start[0], &byte, 1) > 0) {
            }
            int status = 0;
            try {
                const auto compiled = jit::compile(source, for_arch("sm_90a"));
                write_bytes(temp_root() + "/fork-child-" + std::to_string(child) + ".bin", compiled.cubin);
            } catch (const std::exception& error) {
                std::fprintf(stderr, "child %d: %s\n", child, error.what());
                status = 3;
            }
            std::fflush(nullptr);
            ::_exit(status);
        }
    }
    ::close(start[0]);
    ::close(start[1]);  // go
    for (int child = 0; child < 2; ++child) {
        int status = -1;
        SY_CHECK(::waitpid(children[child], &status, 0) == children[child]);
        SY_CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                     "child " << child << " status " << status);
    }
    const std::string bytes0 = read_bytes(temp_root() + "/fork-child-0.bin");
    const std::string bytes1 = read_bytes(temp_root() + "/fork-child-1.bin");
    SY_CHECK(is_elf(bytes0));
    SY_CHECK(bytes0 == bytes1);
    const auto after = jit::compile(source, for_arch("sm_90a"));
    SY_CHECK(after.cache_hit);
    SY_CHECK(read_bytes(after.cubin_path) == bytes0);
    SY_CHECK_EQ(count_temp_files(dir), size_t{0});
}

SY_TEST(jit, concurrent_threads_compile_once) {
    const std::string dir = use_cache_dir("threads");
    constexpr int kNumThreads = 4;
    std::vector<jit::CompiledKernel> results(kNumThreads);
    std::vector<std::string> errors(kNumThreads);
    std::latch start(kNumThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kNumThreads; ++t)
        threads.emplace_back([&, t] {
            start.arrive_and_wait();
            try {
                results[t] = jit::compile(scale_source(64, 5), for_arch("sm_90a"));
            } catch (const std::exception& error) {
                errors[t] = error.what();
            }
        });
    for (auto& thread : threads) thread.join();
    int fresh = 0;
    for (int t = 0; t < kNumThreads; ++t) {
        SY_CHECK_MSG(errors[t].empty(), errors[t]);
        SY_CHECK(results[t].cubin == results[0].cubin);
        fresh += results[t].cache_hit ? 0 : 1;
    }
    SY_CHECK_EQ(fresh, 1);  // threads of one process wait for the first compile instead of repeating it
    SY_CHECK(read_bytes(results[0].cubin_path) == results[0].cubin);
    SY_CHECK_EQ(count_temp_files(dir), size_t{0});
}

SY_TEST(jit, compile_errors_carry_the_nvrtc_log) {
    use_cache_dir("broken");
    const char* const header = "switchyard/testing/broken_kernel.cuh";
    const jit::KernelSource assert_fails{"jit_test", header, "switchyard::device::broken_kernel<1>"};
    SY_CHECK_THROWS_WITH(jit::compile(assert_fails, for_arch("sm_90a")), switchyard::CompileError,
                         "fails to compile on purpose");
    SY_CHECK_THROWS_WITH(jit::compile(assert_fails, for_arch("sm_90a")), switchyard::CompileError,
                         "switchyard::device::broken_kernel<1>");
    const jit::KernelSource missing_name{"jit_test", header, "switchyard::device::broken_kernel<2>"};
    SY_CHECK_THROWS_WITH(jit::compile(missing_name, for_arch("sm_90a")), switchyard::CompileError,
                         "switchyard_jit_test_missing_member");
}

SY_TEST(jit, invalid_sources_are_rejected_before_compiling) {
    use_cache_dir("invalid");
    SY_CHECK_THROWS_WITH(jit::compile({"jit_test", "switchyard/nope.cuh", "k<1>"}, for_arch("sm_90a")),
                         switchyard::InvalidArgument, "not among the embedded device headers");
    SY_CHECK_THROWS_WITH(jit::compile({"jit/test", kSampleHeader, "k<1>"}, for_arch("sm_90a")),
                         switchyard::InvalidArgument, "family");
    SY_CHECK_THROWS_WITH(jit::compile({"jit_test", kSampleHeader, "k<1>; int x"}, for_arch("sm_90a")),
                         switchyard::InvalidArgument, "name expression");
    SY_CHECK_THROWS_WITH(jit::compile(scale_source(128, 4), for_arch("compute_90")),
                         switchyard::InvalidArgument, "compute_90");
}

SY_TEST(jit, fail_on_spills_knob) {
    use_cache_dir("spills");
    const jit::KernelSource spilling{"jit_test", kSampleHeader, "switchyard::device::spill_kernel<96>"};
    const auto compiled = jit::compile(spilling, for_arch("sm_90a"));
    SY_CHECK_MSG(compiled.spill_bytes > 0, compiled.log);
    ::setenv("SWITCHYARD_JIT_FAIL_ON_SPILLS", "1", 1);
    // From the cache: the spill count survives in the .log file.
    SY_CHECK_THROWS_WITH(jit::compile(spilling, for_arch("sm_90a")), switchyard::CompileError,
                         "switchyard::device::spill_kernel<96>");
    SY_CHECK_THROWS_WITH(jit::compile(spilling, for_arch("sm_90a")), switchyard::CompileError,
                         "spill stores");
    const auto clean = jit::compile(scale_source(128, 4), for_arch("sm_90a"));  // no spills: fine
    SY_CHECK_EQ(clean.spill_bytes, 0);
    ::unsetenv("SWITCHYARD_JIT_FAIL_ON_SPILLS");
}

SY_TEST(jit, dump_ptx_and_sass_knobs) {
    const std::string dir = use_cache_dir("dumps");
    ::setenv("SWITCHYARD_JIT_DUMP_PTX", "1", 1);
    ::setenv("SWITCHYARD_JIT_DUMP_SASS", "1", 1);
    const auto compiled = jit::compile(scale_source(128, 4), for_arch("sm_90a"));
    ::unsetenv("SWITCHYARD_JIT_DUMP_PTX");
    ::unsetenv("SWITCHYARD_JIT_DUMP_SASS");
    const std::string stem = compiled.cubin_path.substr(0, compiled.cubin_path.size() - 6);
    const std::string ptx = read_bytes(stem + ".ptx");
    SY_CHECK(ptx.find(".entry " + compiled.lowered_name) != std::string::npos);
    if (fs::exists(stem + ".sass"))
        SY_CHECK(!read_bytes(stem + ".sass").empty());
    else
        std::printf(
            "  (no cuobjdump/nvdisasm here: the SASS dump printed why and the compile still succeeded)\n");
}

SY_TEST(jit, cache_key_follows_the_include_closure) {
    // A header's digest covers the embedded headers it includes, directly or not, and nothing else:
    // an unrelated header set leaves it alone, a header that its includes name changes it.
    static const char kA[] = "#include \"closure/b.cuh\"\n", kB[] = "#include \"closure/late.cuh\"\nint b;\n",
                      kC[] = "int c;\n", kLate[] = "int late;\n", kOther[] = "int other;\n";
    static const jit::EmbeddedFile kFirst[] = {{"closure/a.cuh", kA, sizeof(kA) - 1},
                                               {"closure/b.cuh", kB, sizeof(kB) - 1},
                                               {"closure/c.cuh", kC, sizeof(kC) - 1}};
    static const jit::EmbeddedFile kUnrelated[] = {{"closure/other.cuh", kOther, sizeof(kOther) - 1}};
    static const jit::EmbeddedFile kLateSet[] = {{"closure/late.cuh", kLate, sizeof(kLate) - 1}};
    static const jit::EmbeddedHeaderSet first{kFirst, 3, "closure-first"},
        unrelated{kUnrelated, 1, "closure-u"}, late{kLateSet, 1, "closure-late"};
    jit::add_header_set(first);
    const std::string a = jit::include_closure_digest("closure/a.cuh"),
                      c = jit::include_closure_digest("closure/c.cuh");
    SY_CHECK(a != c);
    SY_CHECK(jit::include_closure_digest("closure/b.cuh") != a);
    jit::add_header_set(unrelated);
    SY_CHECK_EQ(jit::include_closure_digest("closure/a.cuh"), a);
    SY_CHECK_EQ(jit::include_closure_digest("closure/c.cuh"), c);
    jit::add_header_set(late);  // b includes it: a's closure grows, c's does not
    SY_CHECK(jit::include_closure_digest("closure/a.cuh") != a);
    SY_CHECK_EQ(jit::include_closure_digest("closure/c.cuh"), c);
}

SY_TEST(jit, line_info_and_defines_change_the_key) {
    use_cache_dir("options");
    jit::CompileOptions options = for_arch("sm_90a");
    const auto plain = jit::compile(scale_source(128, 4), options);
    options.line_info = true;
    options.defines = {"SWITCHYARD_JIT_TEST_DEFINE=1"};
    const auto with_options = jit::compile(scale_source(128, 4), options);
    SY_CHECK(plain.key != with_options.key);
    SY_CHECK(!with_options.cache_hit);
}

SY_TEST(jit, precompile_warms_the_cache) {
    use_cache_dir("precompile");
    jit::precompile({scale_source(128, 4)}, "sm_90a");
    SY_CHECK(jit::compile(scale_source(128, 4), for_arch("sm_90a")).cache_hit);
}

SY_TEST(jit, load_without_driver_fails_clearly) {
    use_cache_dir("driver");
    try {
        jit::get_kernel(scale_source(128, 4), 0);
    } catch (const switchyard::Error& error) {
        // UnsupportedError without a driver or GPU, CudaError for a driver that cannot initialize.
        const std::string what = error.what();
        SY_CHECK_MSG(what.find("driver") != std::string::npos, what);
        SY_CHECK_THROWS_WITH(jit::arch_for_device(0), switchyard::Error, "driver");
        std::printf(
            "  no usable CUDA driver here, as expected on a CPU machine: %s\n"
            "  (a real launch needs a GPU; see jit.launch_on_gpu)\n",
            what.c_str());
        return;
    }
    SY_SKIP("a CUDA driver and a GPU are present; the launch is tested by jit.launch_on_gpu");
}

// Runs only where a GPU is present (skipped on CPU CI): a real launch of the sample kernel through
// memory allocated with the CUDA runtime, which checks that the JIT loads into the runtime's context.
SY_TEST(jit, launch_on_gpu) {
    int num_devices = 0;
    if (cudaGetDeviceCount(&num_devices) != cudaSuccess || num_devices == 0) {
        cudaGetLastError();
        SY_SKIP("no GPU: a real launch needs one");
    }
    use_cache_dir("launch");
    SY_CHECK(cudaSetDevice(0) == cudaSuccess);
    constexpr int64_t kNumElements = 1000;
    std::vector<float> host(kNumElements);
    for (int64_t i = 0; i < kNumElements; ++i) host[i] = static_cast<float>(i);
    float* device_data = nullptr;
    SY_CHECK(cudaMalloc(&device_data, kNumElements * sizeof(float)) == cudaSuccess);
    SY_CHECK(cudaMemcpy(device_data, host.data(), kNumElements * sizeof(float), cudaMemcpyHostToDevice) ==
             cudaSuccess);

    const jit::Kernel& kernel = jit::get_kernel(scale_source(128, 4), 0);
    SY_CHECK(&kernel == &jit::get_kernel(scale_source(128, 4), 0));
    SY_CHECK(kernel.param_bytes() < 0 ||
             kernel.param_bytes() == static_cast<long long>(sizeof(switchyard::device::ScaleArgs)));
    jit::LaunchConfig config;
    config.grid[0] = 4;
    config.block[0] = 128;
    jit::launch(kernel, config, switchyard::device::ScaleArgs{device_data, kNumElements});
    SY_CHECK(cudaDeviceSynchronize() == cudaSuccess);

    std::vector<float> result(kNumElements);
    SY_CHECK(cudaMemcpy(result.data(), device_data, kNumElements * sizeof(float), cudaMemcpyDeviceToHost) ==
             cudaSuccess);
    for (int64_t i = 0; i < kNumElements; ++i) SY_CHECK_EQ(result[i], 4.0f * static_cast<float>(i));
    cudaFree(device_data);
}

SY_TEST_MAIN()
