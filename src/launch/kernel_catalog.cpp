#include "launch/kernel_catalog.hpp"

namespace switchyard::launch {

std::vector<jit::KernelSource> kernel_catalog(const CatalogShape& shape) {
    std::vector<jit::KernelSource> all;
    for (auto family : {barrier_catalog(), routing_catalog(), ht_catalog(shape), ll_catalog(shape), hier_catalog(shape)})
        all.insert(all.end(), family.begin(), family.end());
    return all;
}

}  // namespace switchyard::launch
