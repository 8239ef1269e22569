// A Communicator over an existing ncclComm_t, for production launches where NCCL is already up.
//
// Bytes go host -> device scratch -> ncclAllGather (in place) -> host, all on an internal
// non-blocking stream so nothing waits on the legacy default stream. The host waits by polling
// cudaStreamQuery instead of synchronizing, so it can give up after `timeout` and notice
// asynchronous NCCL errors (a peer that died) via ncclCommGetAsyncError.
//
// After a timeout the collective may still be queued or running on the GPU, reading and writing
// the scratch buffer; the communicator then refuses further calls and deliberately leaks the
// scratch buffer and the stream (freeing them could block forever or corrupt memory). The caller
// should abort the NCCL communicator (ncclCommAbort) and recreate it.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <thread>

#include "comm/communicator_common.hpp"
#include "comm/nccl_library.hpp"
#include "switchyard/communicator.hpp"
#include "switchyard/errors.hpp"

namespace switchyard {
namespace {

using Clock = std::chrono::steady_clock;
const char* const kPhase = "all_gather (nccl)";

void check_cuda(cudaError_t status, const char* what) {
    if (status != cudaSuccess) {
        throw CudaError(std::string("switchyard: ") + what + " failed: " + cudaGetErrorName(status) + " (" +
                        cudaGetErrorString(status) + ")");
    }
}

// Makes `device` current for the scope and restores the caller's device afterwards: the caller's
// thread may be driving another GPU (several ranks per GPU, or one thread per rank).
class DeviceGuard {
  public:
    explicit DeviceGuard(int device) {
        check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
        if (previous_ != device) check_cuda(cudaSetDevice(device), "cudaSetDevice");
    }
    ~DeviceGuard() { cudaSetDevice(previous_); }
    DeviceGuard(const DeviceGuard&) = delete;
    DeviceGuard& operator=(const DeviceGuard&) = delete;

  private:
    int previous_ = 0;
};

class NcclCommunicator final : public Communicator {
  public:
    NcclCommunicator(const nccl::Library& lib, nccl::Comm comm, int device);
    ~NcclCommunicator() override;

    int rank() const override { return rank_; }
    int size() const override { return size_; }
    void all_gather(const void* send, size_t bytes, void* recv, std::chrono::milliseconds timeout) override;
    void barrier(std::chrono::milliseconds timeout) override;
    nccl::Comm handle() const { return comm_; }
    std::string describe() const override {
        return "nccl rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " (device " +
               std::to_string(device_) + ")";
    }

  private:
    void check_nccl(nccl::Result result, const char* what) const;
    void wait(std::chrono::milliseconds timeout, Clock::time_point deadline);

    const nccl::Library& lib_;
    const nccl::Comm comm_;
    const int device_;
    int rank_ = 0;
    int size_ = 0;
    cudaStream_t stream_ = nullptr;
    unsigned char* scratch_ = nullptr;
    size_t scratch_bytes_ = 0;
    std::string broken_;
    bool leak_ = false;  // a timed-out collective may still use the stream and scratch
};

NcclCommunicator::NcclCommunicator(const nccl::Library& lib, nccl::Comm comm, int device)
    : lib_(lib), comm_(comm), device_(device) {
    check_nccl(lib_.comm_count(comm_, &size_), "ncclCommCount");
    check_nccl(lib_.comm_user_rank(comm_, &rank_), "ncclCommUserRank");
    DeviceGuard guard(device_);
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
}

NcclCommunicator::~NcclCommunicator() {
    if (leak_) return;
    int previous = 0;
    if (cudaGetDevice(&previous) != cudaSuccess) return;  // runtime already torn down at exit
    cudaSetDevice(device_);
    if (scratch_) cudaFree(scratch_);
    if (stream_) cudaStreamDestroy(stream_);
    cudaSetDevice(previous);
}

void NcclCommunicator::check_nccl(nccl::Result result, const char* what) const {
    if (result == nccl::kSuccess) return;
    throw Error(std::string("switchyard: ") + what + " failed on nccl rank " + std::to_string(rank_) + ": " +
                lib_.describe_error(result));
}

void NcclCommunicator::wait(std::chrono::milliseconds timeout, Clock::time_point deadline) {
    // Start with a short sleep (bootstrap collectives usually finish in microseconds), back off to
    // 1 ms so a long wait does not burn a core.
    auto pause = std::chrono::microseconds(20);
    for (;;) {
        const cudaError_t status = cudaStreamQuery(stream_);
        if (status == cudaSuccess) return;
        if (status != cudaErrorNotReady) {
            broken_ = "CUDA error while waiting";
            leak_ = true;
            check_cuda(status, "cudaStreamQuery after ncclAllGather");
        }
        nccl::Result async_error = nccl::kSuccess;
        const nccl::Result query = lib_.comm_get_async_error(comm_, &async_error);
        if (query == nccl::kSuccess && async_error != nccl::kSuccess && async_error != nccl::kInProgress) {
            broken_ = "NCCL reported an asynchronous error";
            leak_ = true;
            throw Error("switchyard: nccl rank " + std::to_string(rank_) +
                        ": NCCL reported an asynchronous error " + "during all_gather: " +
                        lib_.describe_error(async_error) + " (abort the NCCL communicator and recreate it)");
        }
        if (Clock::now() >= deadline) {
            leak_ = true;
            broken_ = comm_detail::timeout_message(
                rank_, timeout, kPhase, "the other ranks (NCCL does not say which)", "nccl communicator");
            throw TimeoutError(broken_ + "; abort the NCCL communicator", rank_, -1, kPhase);
        }
        std::this_thread::sleep_for(pause);
        pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
    }
}

void NcclCommunicator::all_gather(const void* send, size_t bytes, void* recv,
                                  std::chrono::milliseconds timeout) {
    comm_detail::check_collective_args(send, bytes, recv, timeout, describe());
    if (!broken_.empty()) {
        throw Error("switchyard: " + describe() + " is unusable after an earlier failure (" + broken_ +
                    "); abort and recreate the NCCL communicator");
    }
    const auto deadline = Clock::now() + timeout;
    // A zero-byte all_gather still synchronizes like the other communicators: send one byte.
    const unsigned char token = 0;
    const size_t wire_bytes = std::max<size_t>(bytes, 1);
    const void* source = bytes > 0 ? send : &token;
    const size_t total = wire_bytes * static_cast<size_t>(size_);

    DeviceGuard guard(device_);
    if (scratch_bytes_ < total) {
        // Grow geometrically: bootstrap sizes vary little, but each cudaMalloc synchronizes.
        const size_t grown = std::max(total, scratch_bytes_ * 2);
        if (scratch_) check_cuda(cudaFree(scratch_), "cudaFree (communicator scratch)");
        scratch_ = nullptr;
        scratch_bytes_ = 0;
        void* fresh = nullptr;
        check_cuda(cudaMalloc(&fresh, grown), "cudaMalloc (communicator scratch)");
        scratch_ = static_cast<unsigned char*>(fresh);
        scratch_bytes_ = grown;
    }
    // In place (send = recv + rank * count), which NCCL supports, so one buffer suffices.
    unsigned char* mine = scratch_ + static_cast<size_t>(rank_) * wire_bytes;
    check_cuda(cudaMemcpyAsync(mine, source, wire_bytes, cudaMemcpyHostToDevice, stream_),
               "cudaMemcpyAsync (all_gather input)");
    // A non-blocking NCCL communicator (config.blocking = 0) answers ncclInProgress; the wait below
    // then tracks completion through ncclCommGetAsyncError.
    const nccl::Result launched = lib_.all_gather(mine, scratch_, wire_bytes, nccl::kUint8, comm_, stream_);
    if (launched != nccl::kInProgress) check_nccl(launched, "ncclAllGather");
    wait(timeout, deadline);
    if (bytes == 0) return;
    check_cuda(cudaMemcpyAsync(recv, scratch_, total, cudaMemcpyDeviceToHost, stream_),
               "cudaMemcpyAsync (all_gather result)");
    wait(timeout, deadline);
}

void NcclCommunicator::barrier(std::chrono::milliseconds timeout) {
    const unsigned char token = 1;
    std::vector<unsigned char> sink(static_cast<size_t>(size_));
    all_gather(&token, 1, sink.data(), timeout);
}

}  // namespace

namespace nccl {
Comm communicator_handle(const Communicator& communicator) {
    const auto* wrapped = dynamic_cast<const NcclCommunicator*>(&communicator);
    return wrapped ? wrapped->handle() : nullptr;
}
}  // namespace nccl

std::shared_ptr<Communicator> wrap_nccl_communicator(void* nccl_comm, int device) {
    if (nccl_comm == nullptr)
        throw InvalidArgument("switchyard: wrap_nccl_communicator got a null ncclComm_t");
    if (device < 0) {
        throw InvalidArgument("switchyard: wrap_nccl_communicator got device " + std::to_string(device) +
                              "; pass the CUDA device the NCCL communicator was created on");
    }
    const nccl::Library& lib = nccl::library();
    return std::make_shared<NcclCommunicator>(lib, static_cast<nccl::Comm>(nccl_comm), device);
}

}  // namespace switchyard
