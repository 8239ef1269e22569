// DeviceTensor: an output tensor. Either memory the library allocated from the buffer's own
// stream-ordered pool (freed in stream order when the last copy goes away) or a view into the
// buffer's memory (valid until the operation that next reuses that region; the op's
// documentation says which).
#pragma once

#include <memory>

#include "switchyard/tensor.hpp"

namespace switchyard {

class DeviceTensor {
  public:
    DeviceTensor() = default;

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
