// launch(): one cuLaunchKernelEx with the kernel's single by-value argument struct and the
// cooperative / cluster / programmatic-dependent-launch attributes.
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "jit/driver_api.hpp"
#include "jit/jit.hpp"
#include "jit/knobs.hpp"
#include "switchyard/errors.hpp"

namespace switchyard::jit {
namespace {

std::string describe_launch(const Kernel& kernel, const LaunchConfig& config) {
    std::ostringstream out;
    out << kernel.source().kernel << " on device " << kernel.device() << " grid (" << config.grid[0] << ","
        << config.grid[1] << "," << config.grid[2] << ") block (" << config.block[0] << "," << config.block[1]
        << "," << config.block[2] << ") shared " << config.shared_bytes << " B";
    if (config.cooperative) out << " cooperative";
    if (config.cluster_x > 1) out << " cluster " << config.cluster_x;
    if (config.programmatic_dependent_launch) out << " pdl";
    return out.str();
}

void validate(const Kernel& kernel, const LaunchConfig& config, const void* args_struct, size_t args_size) {
    const std::string what = "switchyard jit: launch of " + kernel.source().kernel + ": ";
    if (!args_struct || args_size == 0) throw InvalidArgument(what + "the argument struct is missing");
    for (int i = 0; i < 3; ++i)
        if (config.grid[i] == 0 || config.block[i] == 0)
            throw InvalidArgument(what + "grid and block dimensions must all be >= 1");
    if (config.cluster_x == 0 || config.grid[0] % config.cluster_x != 0)
        throw InvalidArgument(what + "grid[0] = " + std::to_string(config.grid[0]) +
                              " is not a multiple of the cluster size " + std::to_string(config.cluster_x));
    if (kernel.param_bytes() >= 0 && static_cast<long long>(args_size) != kernel.param_bytes())
        throw InvalidArgument(what + "the argument struct is " + std::to_string(args_size) +
                              " bytes but the kernel's parameter is " + std::to_string(kernel.param_bytes()) +
                              " bytes; host and device disagree on the Args struct (rebuild, or check #ifs)");
}

}  // namespace

void launch(const Kernel& kernel, const LaunchConfig& config, const void* args_struct, size_t args_size) {
    validate(kernel, config, args_struct, args_size);
    const DriverApi& api = driver();
    if (config.shared_bytes > 48 * 1024) kernel.ensure_dynamic_shared(config.shared_bytes);

    // Zeroed: the attribute values are a union with padding the driver may read.
    CUlaunchAttribute attributes[3];
    std::memset(attributes, 0, sizeof(attributes));
    unsigned num_attributes = 0;
    if (config.cooperative) {
        attributes[num_attributes].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
        attributes[num_attributes++].value.cooperative = 1;
    }
    if (config.cluster_x > 1) {
        attributes[num_attributes].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attributes[num_attributes].value.clusterDim.x = config.cluster_x;
        attributes[num_attributes].value.clusterDim.y = 1;
        attributes[num_attributes++].value.clusterDim.z = 1;
    }
    if (config.programmatic_dependent_launch) {
        attributes[num_attributes].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attributes[num_attributes++].value.programmaticStreamSerializationAllowed = 1;
    }

    CUlaunchConfig launch_config;
    std::memset(&launch_config, 0, sizeof(launch_config));
    launch_config.gridDimX = config.grid[0];
    launch_config.gridDimY = config.grid[1];
    launch_config.gridDimZ = config.grid[2];
    launch_config.blockDimX = config.block[0];
    launch_config.blockDimY = config.block[1];
    launch_config.blockDimZ = config.block[2];
    launch_config.sharedMemBytes = config.shared_bytes;
    launch_config.hStream = static_cast<CUstream>(config.stream);
    launch_config.attrs = num_attributes ? attributes : nullptr;
    launch_config.numAttrs = num_attributes;

    // The driver copies the parameter bytes at launch; args_struct need not outlive this call.
    void* params[] = {const_cast<void*>(args_struct)};
    // Read once: launches are hot, and the debug knob is a process-start decision.
    static const bool debug = debug_enabled();
    if (debug) debug_log("launch " + describe_launch(kernel, config));
    ScopedContext scope(static_cast<CUcontext>(kernel.context()));
    check_cu(
        api.cuLaunchKernelEx(&launch_config, static_cast<CUfunction>(kernel.function()), params, nullptr),
        "cuLaunchKernelEx", "for " + describe_launch(kernel, config));
}

}  // namespace switchyard::jit
