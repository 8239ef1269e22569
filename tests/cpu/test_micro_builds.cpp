// The microbenchmarks of bench/micro/ are built by hand with nvcc (each file's header says how) and
// decisions in docs/decisions.md rest on their figures, so they must keep compiling as the device
// headers they include change. This compiles each one for sm_90a as its header does, to an object
// (linking needs the driver library, which a CPU-only machine may lack); skipped, saying why,
// where nvcc is missing.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "common/testing.hpp"
#include "jit/disk_cache.hpp"
#include "jit/nvcc_program.hpp"
#include "jit/subprocess.hpp"

using namespace switchyard;

SY_TEST(MicroBenchmarks, EachCompilesWithNvcc) {
    const std::string nvcc = jit::find_nvcc();
    if (nvcc.empty())
        SY_SKIP(
            "nvcc was found neither with the CUDA toolkit nor on PATH: the microbenchmarks are not compiled");
    const std::filesystem::path source_dir = SWITCHYARD_SOURCE_DIR;
    std::vector<std::filesystem::path> micros;
    for (const auto& entry : std::filesystem::directory_iterator(source_dir / "bench/micro"))
        if (entry.path().extension() == ".cu") micros.push_back(entry.path());
    std::sort(micros.begin(), micros.end());
    SY_CHECK_MSG(micros.size() >= 4, "bench/micro/ should hold the microbenchmarks docs/decisions.md cites");
    const std::filesystem::path out_dir =
        std::filesystem::temp_directory_path() / ("switchyard-micro-" + std::to_string(::getpid()));
    std::filesystem::create_directories(out_dir);
    struct RemoveOnExit {
        std::filesystem::path dir;
        ~RemoveOnExit() {
            std::error_code ignored;
            std::filesystem::remove_all(dir, ignored);
        }
    } remove_on_exit{out_dir};
    for (const std::filesystem::path& micro : micros) {
        const std::string object = (out_dir / micro.stem()).string() + ".o";
        const std::string log = (out_dir / micro.stem()).string() + ".log";
        const int status =
            jit::run_to_file({nvcc, "-c", "-O3", "-std=c++20", "-arch=sm_90a",
                              "-I" + (source_dir / "kernels").string(), micro.string(), "-o", object},
                             log, true);
        const std::string output = jit::read_file(log).value_or("");
        std::printf("  %s: nvcc exit status %d\n", micro.filename().c_str(), status);
        SY_CHECK_MSG(status == 0, micro.filename().string() + " does not compile:\n" + output);
        SY_CHECK(std::filesystem::file_size(object) > 0);
    }
}

SY_TEST_MAIN()
