// The network's kernel families: the GIN set-up's (transport/net_gin_window.cuh), the network
// check's and the emulated network's copy kernel. GIN kernels are compiled by nvcc against the NCCL headers
// the library was built with.
#pragma once

#include <vector>

#include "jit/jit.hpp"

namespace switchyard::net {

// [0] gin_lsa_pointers_kernel, [1] gin_reset_kernel.
std::vector<jit::KernelSource> gin_setup_catalog();

// The network check kernel (transport/net_check.cuh, Buffer::check_network): [0] for the emulated
// network (NVRTC), [1] for GIN (nvcc, gin_compile_options()). Defined in network_check.cpp.
std::vector<jit::KernelSource> network_check_catalog();

// The emulated network engine's copy kernel (transport/net_copy.cuh, NVRTC). Defined in
// emulated_network.cpp.
std::vector<jit::KernelSource> network_engine_catalog();

// How every NetGin kernel is compiled (nvcc with the NCCL headers; the arch comes from the device,
// or the caller sets it).
jit::CompileOptions gin_compile_options();

}  // namespace switchyard::net
