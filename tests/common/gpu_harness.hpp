// GPU test harness: ranks as threads of this process (one stream each), spread over 1 or 2 GPUs,
// several ranks per GPU where the rank count exceeds the GPU count (DESIGN.md §4).
//
// Tests call require_gpus(n) first: without enough GPUs it skips with a printed reason.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/testing.hpp"
#include "switchyard/communicator.hpp"

namespace switchyard::testing {

// Number of usable CUDA devices (0 without a driver or GPU), capped by SWITCHYARD_TEST_MAX_GPUS.
int cuda_device_count();
// SY_SKIPs the test with the reason when fewer than `gpus` devices are usable.
void require_gpus(int gpus);

struct RankEnv {
    int rank = 0;
    int num_ranks = 1;
    int device = 0;
    std::shared_ptr<Communicator> communicator;
    cudaStream_t stream = nullptr;
};

// The standard matrix: EP 1, 2, 4, 8 on one GPU, and on two when present.
struct RankConfig {
    int ranks;
    int gpus;
    std::string name() const {
        return "EP" + std::to_string(ranks) + " on " + std::to_string(gpus) + " GPU(s)";
    }
};
std::vector<RankConfig> standard_rank_configs();

// Runs `body` on `num_ranks` threads; rank r uses GPU r * num_gpus / num_ranks. Rethrows the
// first failure as a TestFailure prefixed with its rank.
void run_ranks(int num_ranks, int num_gpus, const std::function<void(RankEnv&)>& body);

void cuda_ok(cudaError_t status, const char* what, const char* file, int line);
#define SY_CUDA_OK(call) ::switchyard::testing::cuda_ok((call), #call, __FILE__, __LINE__)

// A typed device allocation for tests.
template <typename T>
class DeviceArray {
  public:
    DeviceArray() = default;
    explicit DeviceArray(size_t count) : count_(count) {
        if (count) SY_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&data_), count * sizeof(T)));
    }
    explicit DeviceArray(const std::vector<T>& values) : DeviceArray(values.size()) { upload(values); }
    ~DeviceArray() {
        if (data_) cudaFree(data_);
    }
    DeviceArray(DeviceArray&& other) noexcept : data_(other.data_), count_(other.count_) {
        other.data_ = nullptr;
    }
    DeviceArray& operator=(DeviceArray&& other) noexcept {
        if (this != &other) {
            if (data_) cudaFree(data_);
            data_ = other.data_;
            count_ = other.count_;
            other.data_ = nullptr;
        }
        return *this;
    }
    DeviceArray(const DeviceArray&) = delete;
    DeviceArray& operator=(const DeviceArray&) = delete;

    T* data() const { return data_; }
    size_t size() const { return count_; }
    // Synchronous copies and fills on the legacy stream. Ranks' streams are non-blocking, so they
    // do not wait for the legacy stream: wait here until the data has landed (a pageable upload may
    // return before its DMA is done). Never a device-wide sync (co-located ranks may be spinning).
    void upload(const std::vector<T>& values) {
        if (values.empty()) return;
        SY_CUDA_OK(cudaMemcpy(data_, values.data(), values.size() * sizeof(T), cudaMemcpyHostToDevice));
        SY_CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
    }
    std::vector<T> download() const {
        std::vector<T> values(count_);
        if (count_) SY_CUDA_OK(cudaMemcpy(values.data(), data_, count_ * sizeof(T), cudaMemcpyDeviceToHost));
        return values;
    }
    void fill_bytes(int byte) {
        if (!count_) return;
        SY_CUDA_OK(cudaMemset(data_, byte, count_ * sizeof(T)));
        SY_CUDA_OK(cudaStreamSynchronize(cudaStreamLegacy));
    }

  private:
    T* data_ = nullptr;
    size_t count_ = 0;
};

}  // namespace switchyard::testing
