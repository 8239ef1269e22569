// BufferConfig description for logs and mismatch errors.
#include <algorithm>
#include <cstring>
#include <sstream>

#include "switchyard/config.hpp"
#include "switchyard/formats.hpp"

namespace switchyard {

std::string describe(const BufferConfig& config) {
    std::ostringstream out;
    out << "max_tokens_per_rank=" << config.max_tokens_per_rank << ", max_hidden=" << config.max_hidden
        << ", max_topk=" << config.max_topk << ", max_experts=" << config.max_experts
        << ", high_throughput=" << (config.enable_high_throughput ? "on" : "off")
        << ", low_latency=" << (config.enable_low_latency ? "on" : "off")
        << ", ll_max_tokens_per_rank=" << config.ll_max_tokens_per_rank
        << ", timeout_seconds=" << config.timeout_seconds << ", emulated_nodes=" << config.emulated_nodes
        << ", num_sms=" << config.num_sms
        << ", launch_on_caller_stream=" << (config.launch_on_caller_stream ? "on" : "off")
        << ", network_backend=" << network_backend_name(config.network_backend)
        << ", network_bandwidth_gbps=" << config.network_bandwidth_gbps
        << ", network_latency_us=" << config.network_latency_us
        << ", network_adversarial=" << config.network_adversarial
        << ", network_withhold_rank=" << config.network_withhold_rank;
    return out.str();
}

BufferConfig upgraded(const BufferConfig& config) {
    BufferConfig out;
    // Copy what the caller's struct holds; the rest keeps its defaults. The header fields then say
    // what this library's struct is.
    const size_t given = std::min<size_t>(config.struct_size, sizeof(BufferConfig));
    std::memcpy(static_cast<void*>(&out), &config, given);
    out.struct_size = sizeof(BufferConfig);
    out.version = BufferConfig{}.version;
    return out;
}

const char* network_backend_name(NetworkBackend backend) {
    switch (backend) {
        case NetworkBackend::kAuto:
            return "auto";
        case NetworkBackend::kEmulated:
            return "emulated";
        case NetworkBackend::kGin:
            return "gin";
    }
    return "unknown";
}

const char* recv_layout_name(RecvLayout layout) {
    switch (layout) {
        case RecvLayout::kRankMajor:
            return "rank-major";
        case RecvLayout::kExpertContiguous:
            return "expert-contiguous";
        case RecvLayout::kExpertMasked:
            return "expert-masked";
    }
    return "unknown layout";
}

const char* scale_format_name(ScaleFormat format) {
    switch (format) {
        case ScaleFormat::kNone:
            return "none";
        case ScaleFormat::kFloat32:
            return "fp32";
        case ScaleFormat::kUE8M0:
            return "ue8m0";
    }
    return "unknown scale format";
}

}  // namespace switchyard
