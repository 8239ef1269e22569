#include "jit/disk_cache.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <thread>

#include "jit/hash.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::jit {
namespace {

constexpr const char* kMetaMagic = "switchyard-jit-cache 1";
constexpr const char* kLogSeparator = "--- compiler log ---";

std::string errno_text() {
    return std::strerror(errno);
}

}  // namespace

// pid + thread + a per-process counter + random bits: unique across processes, threads and calls,
// even across hosts sharing the cache directory over NFS (pids may collide there, the random
// part does not).
std::string unique_temp_suffix() {
    static std::atomic<unsigned long long> counter{0};
    thread_local std::mt19937_64 random{std::random_device{}() ^
                                        std::hash<std::thread::id>{}(std::this_thread::get_id())};
    std::ostringstream out;
    out << ".tmp." << getpid() << "." << std::hash<std::thread::id>{}(std::this_thread::get_id()) % 1000000
        << "." << counter.fetch_add(1) << "." << std::hex << random();
    return out.str();
}

namespace {

void write_all(int fd, const std::string& bytes, const std::string& path) {
    size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) throw Error("jit cache: writing " + path + " failed: " + errno_text());
        done += static_cast<size_t>(n);
    }
}

// Makes the rename itself durable; best effort (some file systems refuse fsync on directories).
void sync_directory(const std::string& dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

std::string meta_text(const CompiledKernel& kernel) {
    std::ostringstream out;
    out << kMetaMagic << "\n"
        << "cubin_bytes: " << kernel.cubin.size() << "\n"
        << "cubin_hash: " << hash128_hex(kernel.cubin) << "\n"
        << "lowered_name: " << kernel.lowered_name << "\n"
        << "registers: " << kernel.num_registers << "\n"
        << "spill_bytes: " << kernel.spill_bytes << "\n"
        << "stack_bytes: " << kernel.stack_bytes << "\n"
        << kLogSeparator << "\n"
        << kernel.log;
    return out.str();
}

struct Meta {
    size_t cubin_bytes = 0;
    std::string cubin_hash;
    std::string lowered_name;
    int registers = -1;
    int spill_bytes = -1;
    int stack_bytes = -1;
    std::string log;
};

std::optional<Meta> parse_meta(const std::string& text) {
    std::istringstream in(text);
    std::string line;
    if (!std::getline(in, line) || line != kMetaMagic) return std::nullopt;
    Meta meta;
    bool have_size = false;
    while (std::getline(in, line)) {
        if (line == kLogSeparator) {
            const size_t at = text.find(std::string(kLogSeparator) + "\n");
            meta.log = text.substr(at + std::strlen(kLogSeparator) + 1);
            if (!have_size || meta.cubin_hash.empty() || meta.lowered_name.empty()) return std::nullopt;
            return meta;
        }
        const size_t colon = line.find(": ");
        if (colon == std::string::npos) return std::nullopt;
        const std::string name = line.substr(0, colon), value = line.substr(colon + 2);
        try {
            if (name == "cubin_bytes")
                meta.cubin_bytes = std::stoull(value), have_size = true;
            else if (name == "cubin_hash")
                meta.cubin_hash = value;
            else if (name == "lowered_name")
                meta.lowered_name = value;
            else if (name == "registers")
                meta.registers = std::stoi(value);
            else if (name == "spill_bytes")
                meta.spill_bytes = std::stoi(value);
            else if (name == "stack_bytes")
                meta.stack_bytes = std::stoi(value);
        } catch (const std::exception&) {
            return std::nullopt;
        }
    }
    return std::nullopt;  // no separator: truncated
}

}  // namespace

CachePaths cache_paths(const std::string& dir, const std::string& family, const std::string& key) {
    const std::string stem = dir + "/" + family + "-" + key;
    return {dir, stem + ".cubin", stem + ".log", stem + ".ptx", stem + ".sass"};
}

void ensure_cache_dir(const std::string& dir) {
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    if (std::filesystem::is_directory(dir)) return;  // also covers a concurrent creator winning
    throw Error("jit cache: cannot create the cache directory '" + dir + "'" +
                (error ? " (" + error.message() + ")" : std::string()) +
                "; set SWITCHYARD_CACHE_DIR to a writable directory");
}

bool looks_like_cubin(const std::string& bytes) {
    return bytes.size() >= 4 && bytes[0] == '\x7f' && bytes[1] == 'E' && bytes[2] == 'L' && bytes[3] == 'F';
}

std::optional<std::string> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return std::nullopt;
    std::ostringstream bytes;
    bytes << in.rdbuf();
    if (in.bad()) return std::nullopt;
    return bytes.str();
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
    const std::string temp = path + unique_temp_suffix();
    const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        throw Error("jit cache: cannot create " + temp + ": " + errno_text() +
                    "; set SWITCHYARD_CACHE_DIR to a writable directory");
    try {
        write_all(fd, bytes, temp);
        if (::fsync(fd) != 0) throw Error("jit cache: fsync of " + temp + " failed: " + errno_text());
    } catch (...) {
        ::close(fd);
        ::unlink(temp.c_str());
        throw;
    }
    ::close(fd);
    if (::rename(temp.c_str(), path.c_str()) != 0) {
        const std::string why = errno_text();
        ::unlink(temp.c_str());
        throw Error("jit cache: cannot rename " + temp + " to " + path + ": " + why);
    }
    sync_directory(std::filesystem::path(path).parent_path().string());
}

std::optional<CompiledKernel> cache_lookup(const CachePaths& paths) {
    const auto meta_bytes = read_file(paths.meta);
    if (!meta_bytes) return std::nullopt;
    const auto meta = parse_meta(*meta_bytes);
    if (!meta) return std::nullopt;
    auto cubin = read_file(paths.cubin);
    if (!cubin || cubin->size() != meta->cubin_bytes || !looks_like_cubin(*cubin) ||
        hash128_hex(*cubin) != meta->cubin_hash)
        return std::nullopt;
    CompiledKernel kernel;
    kernel.cubin_path = paths.cubin;
    kernel.cubin = std::move(*cubin);
    kernel.lowered_name = meta->lowered_name;
    kernel.log = meta->log;
    kernel.num_registers = meta->registers;
    kernel.spill_bytes = meta->spill_bytes;
    kernel.stack_bytes = meta->stack_bytes;
    return kernel;
}

void cache_store(const CachePaths& paths, const CompiledKernel& kernel) {
    write_file_atomic(paths.cubin, kernel.cubin);
    write_file_atomic(paths.meta, meta_text(kernel));
}

}  // namespace switchyard::jit
