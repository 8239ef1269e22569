// Without a GPU the library says so: creating a Buffer is an UnsupportedError that starts with
// "no GPU" and points at what works without one (not the runtime's "CUDA driver version is
// insufficient"), and the planning functions answer without a GPU. On a machine with a GPU the
// Buffer case skips.
#include <cuda_runtime_api.h>

#include "common/testing.hpp"
#include "switchyard/buffer.hpp"
#include "switchyard/errors.hpp"
#include "switchyard/planning.hpp"

using namespace switchyard;

namespace {

bool gpu_present() {
    int count = 0;
    const bool present = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
    (void)cudaGetLastError();
    return present;
}

}  // namespace

SY_TEST(NoGpu, BufferCreationSaysNoGpu) {
    if (gpu_present()) SY_SKIP("a GPU is present: this case checks the message on machines without one");
    auto communicators = make_in_process_communicators(1);
    bool thrown = false;
    try {
        Buffer buffer(communicators[0], 0, BufferConfig{});
    } catch (const UnsupportedError& error) {
        thrown = true;
        const std::string text = error.what();
        SY_CHECK_MSG(text.rfind("switchyard: no GPU: a Buffer needs a CUDA GPU", 0) == 0, text);
        SY_CHECK_MSG(text.find("CPU reference") != std::string::npos, text);
        SY_CHECK_MSG(text.find("driver version is insufficient") == std::string::npos, text);
    }
    SY_CHECK(thrown);
}

SY_TEST(NoGpu, PlanningNeedsNoGpu) {
    BufferConfig config;
    config.enable_low_latency = true;
    SY_CHECK(buffer_bytes(config, 8) > 0);
    HtDispatchShape shape;
    shape.num_tokens = 4096, shape.hidden = 7168, shape.topk = 8, shape.num_experts = 256;
    SY_CHECK_EQ(ht_output_shapes(config, 8, shape).num_recv_rows, int64_t(8) * 4096);
}

SY_TEST_MAIN()
