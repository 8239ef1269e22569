// DeviceTensor: an output tensor. Either memory the library allocated (stream-ordered, freed when
// the last copy goes away) or a view into the buffer's own memory (valid until the operation that
// next reuses that region; the op's documentation says which).
#pragma once

#include <cuda_runtime_api.h>

#include <initializer_list>
#include <memory>

#include "switchyard/tensor.hpp"

namespace switchyard {

class DeviceTensor {
  public:
    DeviceTensor() = default;

    // Allocates with cudaMallocAsync on `stream` (graph-capturable); the memory is released with
    // cudaFreeAsync on the same stream when the last copy of this tensor is destroyed, so drop it
    // only after the work that reads it has been ordered on that stream.
    static DeviceTensor allocate(DType dtype, std::initializer_list<int64_t> shape, int device,
                                 cudaStream_t stream);
    // A non-owning view (e.g. into the communication buffer).
    static DeviceTensor borrow(const TensorView& view);
    // A view whose memory lives as long as `storage` (shared by all copies of the tensor).
    static DeviceTensor adopt(const TensorView& view, std::shared_ptr<void> storage);

    const TensorView& view() const { return view_; }
    bool defined() const { return view_.defined(); }
    bool owns_memory() const { return storage_ != nullptr; }
    template <typename T>
    T* data() const {
        return view_.ptr_as<T>();
    }

  private:
    TensorView view_;
    std::shared_ptr<void> storage_;
};

}  // namespace switchyard
