#include "jit/sass_dump.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "jit/disk_cache.hpp"
#include "jit/subprocess.hpp"

namespace switchyard::jit {
namespace {

// Directories that may hold the toolkit's binaries, in order: PATH, then the toolkit's own
// (jit/subprocess.hpp).
std::vector<std::string> search_dirs() {
    std::vector<std::string> dirs = path_dirs();
    for (std::string& dir : toolkit_bin_dirs()) dirs.push_back(std::move(dir));
    return dirs;
}

}  // namespace

std::string dump_sass(const std::string& cubin_path, const std::string& sass_path) {
    const auto dirs = search_dirs();
    std::vector<std::string> args;
    if (const auto cuobjdump = find_program("cuobjdump", dirs); !cuobjdump.empty())
        args = {cuobjdump, "-sass", cubin_path};
    else if (const auto nvdisasm = find_program("nvdisasm", dirs); !nvdisasm.empty())
        args = {nvdisasm, cubin_path};
    else
        return "SWITCHYARD_JIT_DUMP_SASS=1: neither cuobjdump nor nvdisasm was found on PATH or in the "
               "toolkit's bin directories; install the CUDA toolkit's binary utilities (cuda-cuobjdump) "
               "to get SASS. The cubin is at " +
               cubin_path;
    // Disassemble into a temporary file, then publish it like the cache files.
    const std::string temp = sass_path + unique_temp_suffix();
    const int status = run_to_file(args, temp, false);
    if (status != 0) {
        ::unlink(temp.c_str());
        return "SWITCHYARD_JIT_DUMP_SASS=1: " + args[0] + " failed (exit status " + std::to_string(status) +
               ") on " + cubin_path;
    }
    if (::rename(temp.c_str(), sass_path.c_str()) != 0) {
        ::unlink(temp.c_str());
        return "SWITCHYARD_JIT_DUMP_SASS=1: cannot write " + sass_path;
    }
    return {};
}

}  // namespace switchyard::jit
