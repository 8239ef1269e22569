#include "jit/sass_dump.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <vector>

#include "jit/disk_cache.hpp"

extern char** environ;

namespace switchyard::jit {
namespace {

// Directories that may hold the toolkit's binaries, in order: PATH, then CUDA_HOME/CUDA_PATH, then
// the toolkit the library was built against, then the conventional install location.
std::vector<std::string> search_dirs() {
    std::vector<std::string> dirs;
    if (const char* path = std::getenv("PATH")) {
        std::string all(path);
        size_t begin = 0;
        while (begin <= all.size()) {
            const size_t end = all.find(':', begin);
            const std::string dir =
                all.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
            if (!dir.empty()) dirs.push_back(dir);
            if (end == std::string::npos) break;
            begin = end + 1;
        }
    }
    for (const char* name : {"CUDA_HOME", "CUDA_PATH"})
        if (const char* root = std::getenv(name); root && *root) dirs.push_back(std::string(root) + "/bin");
#ifdef SY_BUILD_CUDA_INCLUDE_DIR
    dirs.push_back(std::string(SY_BUILD_CUDA_INCLUDE_DIR) + "/../bin");
#endif
    dirs.push_back("/usr/local/cuda/bin");
    return dirs;
}

std::string find_tool(const std::string& name, const std::vector<std::string>& dirs) {
    for (const auto& dir : dirs) {
        const std::string candidate = dir + "/" + name;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return {};
}

// Runs argv with stdout redirected to `output`; returns the exit status (or -1).
int run_to_file(const std::vector<std::string>& args, const std::string& output) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    std::vector<char*> argv;
    for (const auto& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
    argv.push_back(nullptr);
    pid_t pid = 0;
    const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (spawned != 0) return -1;
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

std::string dump_sass(const std::string& cubin_path, const std::string& sass_path) {
    const auto dirs = search_dirs();
    std::vector<std::string> args;
    if (const auto cuobjdump = find_tool("cuobjdump", dirs); !cuobjdump.empty())
        args = {cuobjdump, "-sass", cubin_path};
    else if (const auto nvdisasm = find_tool("nvdisasm", dirs); !nvdisasm.empty())
        args = {nvdisasm, cubin_path};
    else
        return "SWITCHYARD_JIT_DUMP_SASS=1: neither cuobjdump nor nvdisasm was found on PATH, in "
               "$CUDA_HOME/bin "
               "or in /usr/local/cuda/bin; install the CUDA toolkit's binary utilities (cuda-cuobjdump) to "
               "get "
               "SASS. The cubin is at " +
               cubin_path;
    // Disassemble into a temporary file, then publish it like the cache files.
    const std::string temp = sass_path + unique_temp_suffix();
    const int status = run_to_file(args, temp);
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
