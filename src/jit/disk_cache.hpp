// The on-disk cubin cache: <dir>/<family>-<key>.cubin plus <dir>/<family>-<key>.log, which holds
// what a cache hit needs without recompiling (mangled name, registers, spills, compiler log) and
// the cubin's size and hash, so a truncated or corrupt cubin is noticed and rebuilt.
//
// Files are published atomically: written under a unique temporary name in the same directory,
// fsync'ed, then rename()d. Concurrent writers of one key (ranks of a job starting together) each
// publish a complete file and the last rename wins; readers never see a partial file.
#pragma once

#include <optional>
#include <string>

#include "jit/jit.hpp"

namespace switchyard::jit {

struct CachePaths {
    std::string dir;
    std::string cubin;  // <dir>/<family>-<key>.cubin
    std::string meta;   // <dir>/<family>-<key>.log
    std::string ptx;    // <dir>/<family>-<key>.ptx  (SWITCHYARD_JIT_DUMP_PTX)
    std::string sass;   // <dir>/<family>-<key>.sass (SWITCHYARD_JIT_DUMP_SASS)
};

CachePaths cache_paths(const std::string& dir, const std::string& family, const std::string& key);

// Creates the directory (and parents). Throws Error naming SWITCHYARD_CACHE_DIR when it cannot.
void ensure_cache_dir(const std::string& dir);

// The cached kernel, or nullopt when absent, incomplete or corrupt (then the caller recompiles).
// Fills every field of CompiledKernel except key and cache_hit.
std::optional<CompiledKernel> cache_lookup(const CachePaths& paths);

// Publishes cubin and metadata (cubin first: a meta file always describes a complete cubin).
void cache_store(const CachePaths& paths, const CompiledKernel& kernel);

// Atomically writes `bytes` to `path` (temporary file + fsync + rename). Throws Error on failure.
void write_file_atomic(const std::string& path, const std::string& bytes);

// Whole file, or nullopt when it cannot be read.
std::optional<std::string> read_file(const std::string& path);

// A suffix for temporary files that is unique across processes, threads and calls.
std::string unique_temp_suffix();

// True when `bytes` starts with the ELF magic (a cubin is an ELF image).
bool looks_like_cubin(const std::string& bytes);

}  // namespace switchyard::jit
