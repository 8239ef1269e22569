#include "jit/subprocess.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

extern char** environ;

namespace switchyard::jit {

std::vector<std::string> path_dirs() {
    std::vector<std::string> dirs;
    const char* path = std::getenv("PATH");
    if (!path) return dirs;
    const std::string all(path);
    size_t begin = 0;
    while (begin <= all.size()) {
        const size_t end = all.find(':', begin);
        const std::string dir = all.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
        if (!dir.empty()) dirs.push_back(dir);
        if (end == std::string::npos) break;
        begin = end + 1;
    }
    return dirs;
}

std::vector<std::string> toolkit_bin_dirs() {
    std::vector<std::string> dirs;
#ifdef SY_BUILD_CUDA_INCLUDE_DIR
    dirs.push_back(std::string(SY_BUILD_CUDA_INCLUDE_DIR) + "/../bin");
#endif
    for (const char* name : {"CUDA_HOME", "CUDA_PATH"})
        if (const char* root = std::getenv(name); root && *root) dirs.push_back(std::string(root) + "/bin");
    dirs.push_back("/usr/local/cuda/bin");
    return dirs;
}

std::string find_program(const std::string& name, const std::vector<std::string>& dirs) {
    for (const auto& dir : dirs) {
        const std::string candidate = dir + "/" + name;
        if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
    return {};
}

int run_to_file(const std::vector<std::string>& args, const std::string& output, bool with_stderr) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, output.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    if (with_stderr) posix_spawn_file_actions_adddup2(&actions, STDOUT_FILENO, STDERR_FILENO);
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

}  // namespace switchyard::jit
