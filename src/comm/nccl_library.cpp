// Finds and opens libnccl at run time; see nccl_library.hpp for the search order.
#include "comm/nccl_library.hpp"

#include <dlfcn.h>
#include <glob.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>

#include "switchyard/errors.hpp"
#include "util/env_knobs.hpp"

namespace switchyard::nccl {
namespace {

constexpr const char* kSoname = "libnccl.so.2";

#if defined(__x86_64__)
constexpr const char* kTargetDir = "targets/x86_64-linux/lib";
#elif defined(__aarch64__)
constexpr const char* kTargetDir = "targets/sbsa-linux/lib";
#else
constexpr const char* kTargetDir = "lib";
#endif

std::string env_or_empty(const char* name) {
    const char* value = std::getenv(name);
    return value ? std::string(value) : std::string();
}

void add_toolkit(std::vector<std::string>& out, const std::string& root) {
    if (root.empty()) return;
    for (const char* sub : {"lib64", "lib", kTargetDir}) out.push_back(root + "/" + sub + "/" + kSoname);
}

// Expands a glob pattern; several Python versions may match, all are tried.
void add_glob(std::vector<std::string>& out, const std::string& pattern) {
    glob_t matches{};
    if (glob(pattern.c_str(), 0, nullptr, &matches) == 0) {
        for (size_t i = 0; i < matches.gl_pathc; ++i) out.emplace_back(matches.gl_pathv[i]);
    }
    globfree(&matches);
}

[[maybe_unused]] std::string parent_dir(std::string path) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    const size_t slash = path.rfind('/');
    return slash == std::string::npos ? std::string() : path.substr(0, slash);
}

// Tries one candidate; on failure appends dlerror()'s text to `tried`.
void* try_open(const std::string& path, std::ostringstream& tried) {
    void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char* why = dlerror();
        tried << "\n  " << path << ": " << (why ? why : "not found");
    }
    return handle;
}

template <typename Fn>
void resolve(void* handle, const std::string& path, const char* symbol, Fn*& slot) {
    dlerror();
    void* address = dlsym(handle, symbol);
    if (!address) {
        throw UnsupportedError("switchyard: " + path + " lacks " + symbol +
                               "; Switchyard needs NCCL 2.7 or newer (set SWITCHYARD_NCCL_LIBRARY to "
                               "choose another libnccl.so.2)");
    }
    slot = reinterpret_cast<Fn*>(address);
}

Library bind_symbols(void* handle, const std::string& path);

template <typename Fn>
void resolve_optional(void* handle, const char* symbol, Fn*& slot) {
    dlerror();
    slot = reinterpret_cast<Fn*>(dlsym(handle, symbol));
}

Library bind(void* handle, const std::string& path) {
    try {
        return bind_symbols(handle, path);
    } catch (...) {
        dlclose(handle);  // never used, so unloading is safe
        throw;
    }
}

Library bind_symbols(void* handle, const std::string& path) {
    Library lib;
    lib.path = path;
    lib.handle = handle;
    resolve(handle, path, "ncclGetVersion", lib.get_version);
    resolve(handle, path, "ncclGetErrorString", lib.get_error_string);
    resolve(handle, path, "ncclGetUniqueId", lib.get_unique_id);
    resolve(handle, path, "ncclCommInitRank", lib.comm_init_rank);
    resolve(handle, path, "ncclCommInitAll", lib.comm_init_all);
    resolve(handle, path, "ncclCommDestroy", lib.comm_destroy);
    resolve(handle, path, "ncclCommCount", lib.comm_count);
    resolve(handle, path, "ncclCommUserRank", lib.comm_user_rank);
    resolve(handle, path, "ncclCommGetAsyncError", lib.comm_get_async_error);
    resolve(handle, path, "ncclAllGather", lib.all_gather);
    resolve(handle, path, "ncclSend", lib.send);
    resolve(handle, path, "ncclRecv", lib.recv);
    resolve(handle, path, "ncclGroupStart", lib.group_start);
    resolve(handle, path, "ncclGroupEnd", lib.group_end);
    resolve_optional(handle, "ncclMemAlloc", lib.mem_alloc);
    resolve_optional(handle, "ncclMemFree", lib.mem_free);
    resolve_optional(handle, "ncclCommWindowRegister", lib.comm_window_register);
    resolve_optional(handle, "ncclCommWindowDeregister", lib.comm_window_deregister);
    resolve_optional(handle, "ncclDevCommCreate", lib.dev_comm_create);
    resolve_optional(handle, "ncclDevCommDestroy", lib.dev_comm_destroy);
    resolve_optional(handle, "ncclGetLastError", lib.get_last_error);
    // ncclGetVersion needs no GPU; it also proves the library is usable at all.
    if (lib.get_version(&lib.version) != kSuccess) {
        throw UnsupportedError("switchyard: ncclGetVersion failed in " + path);
    }
    return lib;
}

}  // namespace

std::string Library::describe_error(Result result) const {
    std::ostringstream out;
    out << "NCCL error " << result;
    if (get_error_string) {
        const char* text = get_error_string(result);
        if (text) out << " (" << text << ")";
    }
    return out.str();
}

std::string version_text(int code) {
    if (code <= 0) return "none";
    const int major = code >= 10000 ? code / 10000 : code / 1000;
    const int minor = code >= 10000 ? (code % 10000) / 100 : (code % 1000) / 100;
    const int patch = code % 100;
    return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

std::vector<std::string> library_candidates() {
    std::vector<std::string> out{kSoname};
#ifdef SY_BUILD_CUDA_INCLUDE_DIR
    // CMake passes the toolkit's include directory (possibly a ;-list); its parent is the root.
    {
        std::string dirs = SY_BUILD_CUDA_INCLUDE_DIR;
        std::istringstream list(dirs);
        for (std::string dir; std::getline(list, dir, ';');) add_toolkit(out, parent_dir(dir));
    }
#endif
    add_toolkit(out, env_or_empty("CUDA_HOME"));
    add_toolkit(out, env_or_empty("CUDA_PATH"));
    add_toolkit(out, "/usr/local/cuda");
    const std::string wheel = "/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2";
    for (const char* prefix_env : {"VIRTUAL_ENV", "CONDA_PREFIX"}) {
        const std::string prefix = env_or_empty(prefix_env);
        if (!prefix.empty()) add_glob(out, prefix + wheel);
    }
    const std::string home = env_or_empty("HOME");
    if (!home.empty()) add_glob(out, home + "/.local" + wheel);
    add_glob(out, "/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2");
    add_glob(out, "/usr/local/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2");
    add_glob(out, "/usr/lib/python3/dist-packages/nvidia/nccl/lib/libnccl.so.2");
    return out;
}

Library load_library() {
    std::ostringstream tried;
    const std::string override_path = util::knob_text(util::Knob::kNcclLibrary);
    if (!override_path.empty()) {
        void* handle = try_open(override_path, tried);
        if (!handle) {
            throw UnsupportedError("switchyard: cannot load NCCL from SWITCHYARD_NCCL_LIBRARY:" +
                                   tried.str());
        }
        return bind(handle, override_path);
    }
    for (const std::string& candidate : library_candidates()) {
        if (void* handle = try_open(candidate, tried)) return bind(handle, candidate);
    }
    throw UnsupportedError(
        "switchyard: NCCL (libnccl.so.2) not found; install NCCL or point SWITCHYARD_NCCL_LIBRARY at "
        "libnccl.so.2. Tried:" +
        tried.str());
}

const Library& library() {
    // Not std::call_once: a failed load should be retried (the user may fix the environment), and
    // call_once with exceptions is still unreliable on some libstdc++ versions.
    static std::mutex mutex;
    static std::optional<Library> loaded;
    std::lock_guard<std::mutex> lock(mutex);
    if (!loaded) loaded = load_library();
    return *loaded;
}

}  // namespace switchyard::nccl
