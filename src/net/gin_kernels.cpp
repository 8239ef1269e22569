#include "net/gin_kernels.hpp"

namespace switchyard::net {

std::vector<jit::KernelSource> gin_setup_catalog() {
    return {{"net_gin_setup", "switchyard/transport/net_gin_window.cuh", "switchyard::device::gin_lsa_pointers_kernel"},
            {"net_gin_setup", "switchyard/transport/net_gin_window.cuh", "switchyard::device::gin_reset_kernel"}};
}

jit::CompileOptions gin_compile_options() {
    jit::CompileOptions options;
    options.compiler = jit::Compiler::kNvccNccl;
    return options;
}

}  // namespace switchyard::net
