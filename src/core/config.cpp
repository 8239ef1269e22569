// BufferConfig description for logs and mismatch errors.
#include <sstream>

#include "switchyard/config.hpp"

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
        << ", launch_on_caller_stream=" << (config.launch_on_caller_stream ? "on" : "off");
    return out.str();
}

}  // namespace switchyard
