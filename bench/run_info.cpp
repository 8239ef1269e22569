#include "run_info.hpp"

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "harness/cuda_raii.hpp"

namespace switchyard::bench {
namespace {

// First line of a shell command's stdout, or "" if it failed.
std::string first_line_of(const char* command) {
    FILE* pipe = popen(command, "r");
    if (!pipe) return {};
    std::string line;
    char chunk[256];
    while (std::fgets(chunk, sizeof(chunk), pipe)) {
        line += chunk;
        if (!line.empty() && line.back() == '\n') break;
    }
    const int status = pclose(pipe);
    if (status != 0) return {};
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    return line;
}

}  // namespace

std::string current_commit() {
    // An explicit SWITCHYARD_BENCH_COMMIT wins: a copied working tree can carry a stale .git.
    if (const char* env = std::getenv("SWITCHYARD_BENCH_COMMIT"); env && *env) return env;
    std::string commit = first_line_of("git rev-parse --short HEAD 2>/dev/null");
    if (!commit.empty()) return commit;
    return "unknown";
}

std::string iso8601_utc_now() {
    const std::time_t now = std::time(nullptr);
    std::tm utc{};
    gmtime_r(&now, &utc);
    char text[32];
    std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", &utc);
    return text;
}

RunInfo collect_run_info(int num_gpus) {
    RunInfo info;
    info.num_gpus = num_gpus;
    if (num_gpus > 0) info.gpu = harness::gpu_name(0);
    info.commit = current_commit();
    info.date = iso8601_utc_now();
    return info;
}

}  // namespace switchyard::bench
