#include "launch/kernel_catalog.hpp"

#include "switchyard/common/record_layout.cuh"

namespace switchyard::launch {

const std::vector<DispatchPayload>& ht_dispatch_payloads() {
    static const std::vector<DispatchPayload> payloads = {{device::kPayloadBf16, device::kScaleNone},
                                                          {device::kPayloadBf16, device::kScaleFloat32},
                                                          {device::kPayloadBf16, device::kScaleUe8m0},
                                                          {device::kPayloadFp8, device::kScaleFloat32},
                                                          {device::kPayloadFp8, device::kScaleUe8m0}};
    return payloads;
}

std::vector<jit::KernelSource> kernel_catalog(const CatalogShape& shape) {
    std::vector<jit::KernelSource> all;
    for (auto family : {barrier_catalog(), routing_catalog(), ht_catalog(shape), ll_catalog(shape), hier_catalog(shape)})
        all.insert(all.end(), family.begin(), family.end());
    return all;
}

}  // namespace switchyard::launch
