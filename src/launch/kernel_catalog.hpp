// Every kernel instantiation the launchers can produce, per kernel family, for one shape: the
// instantiations differ in their discrete template arguments (scale kind, layout, reduction, index
// type, halves), the shape's hidden size and top-k fill in the rest. Each launcher lists its own
// family (it is the only place that spells its template arguments); the CPU tests compile one
// instantiation per family and check that the catalog is well formed, the GPU suite compiles all.
#pragma once

#include <string>
#include <vector>

#include "jit/jit.hpp"

namespace switchyard::launch {

struct CatalogShape {
    int hidden = 7168;
    int topk = 8;
};

// The one-node barrier and the barrier across nodes on the emulated network; the latter's GIN
// instantiation compiles with nvcc and is listed apart (barrier_gin_catalog).
std::vector<jit::KernelSource> barrier_catalog();
std::vector<jit::KernelSource> barrier_gin_catalog();
std::vector<jit::KernelSource> routing_catalog();
std::vector<jit::KernelSource> ht_catalog(const CatalogShape& shape);
std::vector<jit::KernelSource> ll_catalog(const CatalogShape& shape);
// The hierarchical HT kernels (several nodes) on the emulated network; their GIN instantiations
// compile with nvcc and are listed apart (launch/hier_launch.hpp, hier_gin_catalog).
std::vector<jit::KernelSource> hier_catalog(const CatalogShape& shape);

// The (input payload, record scale kind) pairs an HT dispatch is instantiated for, direct and
// hierarchical alike: bf16 rows passed through or quantized to either scale kind, fp8 rows with
// either scale kind.
struct DispatchPayload {
    int input_payload;
    int scale_kind;
};
const std::vector<DispatchPayload>& ht_dispatch_payloads();

// All of the above, in that order.
std::vector<jit::KernelSource> kernel_catalog(const CatalogShape& shape = {});

}  // namespace switchyard::launch
