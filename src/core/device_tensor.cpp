// DeviceTensor: adopted or borrowed views (the library allocates in core/output_memory.cpp).
#include "switchyard/device_tensor.hpp"

namespace switchyard {

DeviceTensor DeviceTensor::adopt(const TensorView& view, std::shared_ptr<void> storage) {
    DeviceTensor tensor;
    tensor.view_ = view;
    tensor.storage_ = std::move(storage);
    return tensor;
}

DeviceTensor DeviceTensor::borrow(const TensorView& view) {
    DeviceTensor tensor;
    tensor.view_ = view;
    return tensor;
}

}  // namespace switchyard
