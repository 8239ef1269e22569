// The kernels of one family, looked up by the template arguments that vary per op shape. A call
// costs a lock and a scan of the shapes seen so far (a handful), then the loaded kernel's pointer
// (jit::CachedKernel): no source string is built and no cache key hashed once a shape was seen.
#pragma once

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "jit/jit.hpp"

namespace switchyard::launch {

// `Shape`: a small struct with operator==; `make_source` spells its instantiation.
template <typename Shape>
class ShapeKernels {
  public:
    using MakeSource = jit::KernelSource (*)(const Shape&);
    // How a shape's kernel is compiled (e.g. the nvcc path for a GIN kernel); null: the defaults.
    using MakeOptions = jit::CompileOptions (*)(const Shape&);
    explicit ShapeKernels(MakeSource make_source, MakeOptions make_options = nullptr)
        : make_source_(make_source), make_options_(make_options) {}

    // Compiles (disk cache) and loads the shape's kernel on first use; thread-safe. The lock is
    // not held while loading, so a rank that loads never blocks another rank's lookup.
    const jit::Kernel& get(const Shape& shape, int device) { return entry(shape).get(device); }

  private:
    const jit::CachedKernel& entry(const Shape& shape) {
        std::lock_guard<std::mutex> lock(mutex_);
        for (const auto& [known, kernel] : entries_)
            if (known == shape) return *kernel;
        entries_.emplace_back(shape, std::make_unique<jit::CachedKernel>(
                                         make_source_(shape), make_options_ ? make_options_(shape) : jit::CompileOptions{}));
        return *entries_.back().second;
    }

    MakeSource make_source_;
    MakeOptions make_options_;
    std::mutex mutex_;
    std::vector<std::pair<Shape, std::unique_ptr<jit::CachedKernel>>> entries_;
};

}  // namespace switchyard::launch
