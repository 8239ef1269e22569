// The device headers the JIT compiles against: the library's own (kernels/, embedded at build time
// by cmake/embed_headers.cmake) and any set a program adds (a test's own kernels), so code that is
// not part of the product never ships inside the library.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace switchyard::jit {

struct EmbeddedFile {
    const char* path;      // relative to its kernels/ root, e.g. "switchyard/common/base.cuh"
    const char* contents;  // NUL-terminated
    size_t size;
};

// One generated set of headers: files and a SHA-256 digest over their paths and contents.
struct EmbeddedHeaderSet {
    const EmbeddedFile* files;
    size_t num_files;
    const char* digest;
};

namespace embedded {
extern const EmbeddedHeaderSet kLibraryHeaders;  // generated from kernels/
}  // namespace embedded

// Makes another set visible to every later compile (its digest joins the cache key). Adding the
// same set twice is a no-op; a path already known is an InvalidArgument. Thread-safe.
void add_header_set(const EmbeddedHeaderSet& set);

// Every header known now (library first), and the digest of them all.
std::vector<EmbeddedFile> all_headers();
std::string headers_digest();
// The digest of `header` and every embedded header it includes, directly or not (#include "..."
// lines naming an embedded path): a kernel's cache key changes only when code it compiles changes.
std::string include_closure_digest(const std::string& header);

}  // namespace switchyard::jit
